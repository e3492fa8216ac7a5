"""The maintenance-effect benchmark (entry point: bench/maintenance_effect.py)."""
