"""The vector index: the embedder, one Chroma collection per namespace (``index``), the outbox
applied to it and rebuilds (``indexer``), and what is known of its health (``health``).

Derived from SQL, rebuildable from it. Imports values, ``store.reads``, ``store.database`` and
``store.coordination``; never the lexical index.
"""
