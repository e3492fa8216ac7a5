"""The fleet benchmark (`python bench/fleet.py`): a night's dreaming for many namespaces."""
