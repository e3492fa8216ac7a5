"""bench/models.py: embedding models shipped in PyPI packages, measured on every family."""
