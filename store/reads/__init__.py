"""Every SQL read of the store, each returning frozen views (``store.views``) or plain values.

- ``memories``: memories by id, by watermark, by hash, type or time; namespaces; the export;
- ``records``: maintenance records, pending plans, a memory's history, tokens spent;
- ``work``: what the daemon's jobs read besides memories: logs, job state, the outbox;
- ``search``: the reads on the search path (Core statements built once, no ORM);
- ``listing``: memories page by page, a memory's relations, the namespaces and their counts;
- ``identities``: which incoming items the store holds already, and with what content;
- ``indexing``: what health reports of the vector index read: the outbox's backlog, revisions,
  active memories per namespace.

``store.database.Database`` holds one of each over an engine. Writes are elsewhere: only the
writer (``store.write.unit``) changes memories, relations, records and job state.

Imports the tables (``store.models``, ``store.db``) and values only: no index, writer or use case.
"""
