"""The LoCoMo retrieval benchmark (entry point: bench/locomo.py)."""
