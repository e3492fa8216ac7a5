"""The lexical index: BM25 over each namespace's memories, kept current from SQL and saved beside
the store (``cache``, ``files``), searched as a view of a base plus a tail (``view``).

Imports values and ``store.reads`` (its source), never the vector index or the write side.
"""
