"""The maintenance benchmark (entry point: bench/maintenance.py)."""
