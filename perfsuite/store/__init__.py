"""Where results are kept: baseline files (atomic writes under a lock) and their command line."""
