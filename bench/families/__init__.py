"""Other families of retrieval data for bench/family.py: converters, halves, runs, report."""
