"""The read API: ingest, search and inspect memories over HTTP (FastAPI).

``store.api.app.create_app`` assembles the modules of this package:

- errors: ApiError and the one JSON error shape;  auth: keys, the caller and its namespaces;
- body: the guard of request bodies;  openapi: the security schemes and shared refusals;
- metrics, job_metrics: Prometheus metrics, their middleware, the jobs' metrics;
- deps: the state handlers share;  responses: the response models they share;
- routes_ingest, routes_search, routes_memories, routes_edits, routes_listing, routes_ops,
  routes_status, routes_dream, routes_records: the endpoints, each module registering its group
  of routes on the app (``add_*_route(s)(app)``);
- console: the web console at /ui.

The package reaches the store through the use cases (``store.service.Store``, ``store.ingest``,
``store.listing``, ``store.status``, ``store.shapes``, the write side's edit, forget and undo) and
the values they take and give; never tables, sessions, units of work or index internals (the
import-linter contract "api-use-cases" holds this).

Reinforcement and vector indexing happen in background threads started by the app's lifespan,
so a request only reads or writes SQL.
"""
