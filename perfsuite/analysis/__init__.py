"""Pure computation on measurements: statistics, verdicts, MFU, utilisation summaries, diagnosis.

Imports contract and common only; both sides may use it.
"""
