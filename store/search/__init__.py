"""Search: how a query is read (``query_shape``), candidates gathered from both indexes and SQL
(``searcher``), and ranked by pure scoring (``scoring``).

Only reads: imports the indexes, ``store.reads`` and values, never the write side (a contract);
recalls it finds are written back by ``store.write.reinforcement``, off the request path.
"""
