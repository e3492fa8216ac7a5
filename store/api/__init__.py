"""The read API: ingest, search and inspect memories over HTTP (FastAPI).

Every error, ours or FastAPI's, has one JSON shape (store.api.errors). Reinforcement and vector
indexing happen in background threads started by the app's lifespan, so a request only reads or
writes SQL. ``create_app`` (store.api.app) assembles the modules of this package:

- errors: ApiError and the error shape;  auth: keys, the caller and its namespaces;
- metrics: Prometheus metrics and their middleware;  deps: the state handlers share;
- routes_ingest, routes_search, routes_memories, routes_ops, records: the endpoints;
- responses: the response models of the OpenAPI document.
"""

from store.api.app import create_app, serve
from store.api.auth import (
    DEFAULT_NAMESPACE,
    OPEN,
    Principal,
    authenticate,
    choose_namespace,
    presented_key,
)
from store.api.deps import MAX_ID, ApiState, api_state
from store.api.errors import ApiError, error_response
from store.api.metrics import Metrics, MetricsMiddleware
from store.api.routes_ingest import parse_batch
from store.api.routes_memories import memory_not_found
from store.api.routes_search import MAX_QUERY_CHARS, make_filters, parse_meta

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_ID",
    "MAX_QUERY_CHARS",
    "OPEN",
    "ApiError",
    "ApiState",
    "Metrics",
    "MetricsMiddleware",
    "Principal",
    "api_state",
    "authenticate",
    "choose_namespace",
    "create_app",
    "error_response",
    "make_filters",
    "memory_not_found",
    "parse_batch",
    "parse_meta",
    "presented_key",
    "serve",
]
