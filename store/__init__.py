"""The store, the ground floor: SQL (the truth), the indexes derived from it, search, the API.

Each floor imports only those below it (the ``store-floors`` contract in pyproject.toml):

    api                                    the HTTP API and the console (/ui)
    ingest, listing, shapes, status        use cases over the Store; JSON shapes of what it holds
    service                                ``Store``: SQL, both indexes, search and recall as one
    search                                 gathering candidates and ranking them
    lexical | vector                       the BM25 index and the Chroma index, apart
    database                               ``Database``: the reads and the one writer together
    coordination | write                   cross-process tables; every change with its record
    exports                                export lines, restore, import into a namespace
    reads                                  every SQL read, returning frozen views
    conflicts, images, schemas, models, db, requests, views, ...   values and tables
    clock, errors, kinds                   the kernel: imports nothing, and prompts/ only this

docs/architecture.md tells where to look for what.
"""
