"""Datasets for the `real` data location: generated into the cache, or checked in the user's folder."""
