"""The latency and scale benchmark (entry point: bench/latency.py)."""
