"""The results history: every run's bursts in SQLite or PostgreSQL, with change points."""
