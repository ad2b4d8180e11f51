"""Leaf helpers both sides use: files, number formatting, hardware discovery. Import nothing of perfsuite's."""
