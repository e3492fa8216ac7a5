"""The read API: ingest, search and inspect memories over HTTP (FastAPI).

``store.api.app.create_app`` assembles the modules of this package:

- errors: ApiError and the one JSON error shape;  auth: keys, the caller and its namespaces;
- metrics: Prometheus metrics and their middleware;  deps: the state handlers share;
- routes_ingest, routes_search, routes_memories, routes_ops, records: the endpoints;
- responses: the response models of the OpenAPI document.

Reinforcement and vector indexing happen in background threads started by the app's lifespan,
so a request only reads or writes SQL.
"""
