"""SQLite's single writer during a night: bench/sqlite_night.py's modules."""
