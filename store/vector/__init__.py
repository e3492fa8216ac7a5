"""The vector index: the embedder, one Chroma collection per namespace (``index``), the outbox
applied to it and rebuilds (``indexer``), what is known of its health (``health``), and what an
erasure does to an embedded Chroma's files (``compaction``, ``segments``); a serving process's
background work (``workers``: the index worker, warming up, settling the heap).

Derived from SQL, rebuildable from it. Imports values, ``store.reads``, ``store.database`` and
``store.coordination``; never the lexical index.
"""
