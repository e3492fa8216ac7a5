"""The read API: ingest, search and inspect memories over HTTP (FastAPI).

Every error, ours or FastAPI's, has one JSON shape:
``{"error": {"status": 422, "message": "...", "problems": [{"where": "...", "what": "..."}]}}``.
Reinforcement and vector indexing happen in background threads started by the app's lifespan,
so a request only reads or writes SQL.
"""

import hmac
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, cast

import uvicorn
from fastapi import Depends, FastAPI, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from loguru import logger
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, StringConstraints
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from secretary.clock import ensure_utc, utc_now
from secretary.config import ApiKey
from store.api_records import router as records_router
from store.errors import ValidationFailed
from store.memory_view import hit_json, memory_json
from store.models import MaintenanceRecord
from store.reinforcement import Reinforcer
from store.repository import AddResult
from store.schemas import TYPE_PATTERN, LogIn, MemoryIn
from store.search import SearchFilters, SearchRequest
from store.service import Store
from store.vector_index import VectorIndexError
from store.workers import IndexWorker

DEFAULT_NAMESPACE = "default"  # the namespace of an open API (no keys configured)
MAX_QUERY_CHARS = 4000
MAX_ID = 2**63 - 1  # beyond a 64-bit id the database driver itself would fail

Problems = Sequence[tuple[str, str]]


# -- errors ------------------------------------------------------------------------------------


class ApiError(Exception):
    """A request we refuse: an HTTP status, a message and the problems found."""

    def __init__(
        self,
        status: int,
        message: str,
        problems: Problems = (),
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = list(problems)
        self.headers = dict(headers or {})


def error_response(
    status: int, message: str, problems: Problems = (), headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {
        "error": {
            "status": status,
            "message": message,
            "problems": [{"where": where, "what": what} for where, what in problems],
        }
    }
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _validation_problems(exc: RequestValidationError) -> list[tuple[str, str]]:
    out = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ())) or "request"
        out.append((where, str(error.get("msg", "invalid"))))
    return out


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(_: Request, exc: Exception) -> Response:
        err = cast(ApiError, exc)
        return error_response(err.status, err.message, err.problems, err.headers)

    async def invalid_request(_: Request, exc: Exception) -> Response:
        problems = _validation_problems(cast(RequestValidationError, exc))
        return error_response(422, "invalid request", problems)

    async def http_error(request: Request, exc: Exception) -> Response:
        err = cast(StarletteHTTPException, exc)
        problem = (f"{request.method} {request.url.path}", str(err.detail))
        return error_response(err.status_code, str(err.detail), [problem], err.headers)

    async def rejected(_: Request, exc: Exception) -> Response:
        problems = cast(ValidationFailed, exc).problems
        return error_response(422, "rejected, nothing written", problems)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(ValidationFailed, rejected)


# -- authentication and namespaces ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is calling: a configured key, or anyone when the API is open (``namespaces=None``)."""

    name: str
    namespaces: tuple[str, ...] | None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


OPEN = Principal(name="open", namespaces=None)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """Return the key from ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, if any."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key", "").strip() or None


def authenticate(keys: Sequence[ApiKey], presented: str | None) -> Principal:
    """Given the configured keys and the presented one, return the caller. Raise 401 if unknown."""
    if not keys:
        return OPEN
    if presented is None:
        raise _unauthorized("missing API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
    found: ApiKey | None = None
    for candidate in keys:  # compare with every key, in constant time, to leak nothing by timing
        if hmac.compare_digest(candidate.key.encode(), presented.encode()):
            found = candidate
    if found is None:
        raise _unauthorized("invalid API key")
    return Principal(name=found.name or found.key[:2] + "***", namespaces=found.namespaces)


def _unauthorized(message: str) -> ApiError:
    return ApiError(
        401, message, [("header.authorization", message)], headers={"WWW-Authenticate": "Bearer"}
    )


def choose_namespace(principal: Principal, requested: str | None) -> str:
    """Return the namespace a request acts on. Raise 422 if it is ambiguous, 403 if forbidden."""
    if requested is None:
        if principal.namespaces is None:
            return DEFAULT_NAMESPACE
        if len(principal.namespaces) == 1:
            return principal.namespaces[0]
        raise ApiError(
            422,
            "namespace is required",
            [("query.namespace", "this API key has several namespaces: name one")],
        )
    if not principal.allows(requested):
        raise ApiError(
            403,
            f"this API key may not use namespace {requested!r}",
            [("query.namespace", "not one of this key's namespaces")],
        )
    return requested


def memory_not_found(memory_id: int) -> ApiError:
    """The one 404 for a memory, whether it is missing or belongs to a namespace the key lacks."""
    return ApiError(
        404, f"memory {memory_id} does not exist", [("path.memory_id", "no such memory")]
    )


# -- metrics -----------------------------------------------------------------------------------


class Metrics:
    """The app's Prometheus metrics, in a registry of its own so that many apps can coexist."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "secretary_http_requests",
            "HTTP requests by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "secretary_http_request_duration_seconds",
            "HTTP request latency by method and route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.searches = Counter("secretary_searches", "Searches served.", registry=self.registry)
        self.memories_ingested = Counter(
            "secretary_memories_ingested",
            "Memories created through the API.",
            registry=self.registry,
        )
        self.logs_ingested = Counter(
            "secretary_logs_ingested", "Log lines created through the API.", registry=self.registry
        )
        self.outbox = Gauge(
            "secretary_index_outbox_size",
            "Changes waiting for the vector index.",
            registry=self.registry,
        )
        self.reinforcement_pending = Gauge(
            "secretary_reinforcement_pending",
            "Memories waiting for their recall to be written.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (not its path: bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # stays so if the app raises before responding

        async def send_counting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_counting)
        finally:
            route = str(getattr(scope.get("route"), "path", "unmatched"))
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)


# -- state -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ApiState:
    """What the handlers share; kept on ``app.state.secretary``."""

    store: Store
    clock: Callable[[], datetime]
    reinforcer: Reinforcer
    worker: IndexWorker
    metrics: Metrics


def api_state(app: FastAPI) -> ApiState:
    return cast(ApiState, app.state.secretary)


def _state(request: Request) -> ApiState:
    return api_state(cast(FastAPI, request.app))


async def _principal(request: Request) -> Principal:
    keys = _state(request).store.settings.api.keys
    return authenticate(keys, presented_key(request.headers))


State = Annotated[ApiState, Depends(_state)]
Caller = Annotated[Principal, Depends(_principal)]
NamespaceParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=128,
        description="Defaults to the key's only namespace, or 'default' when no keys are set.",
    ),
]
MemoryId = Annotated[int, Path(ge=1, le=MAX_ID)]


# -- response models (for the OpenAPI document) --------------------------------------------------


class ErrorOut(BaseModel):
    error: dict[str, Any]


class AddOut(BaseModel):
    ids: list[int]
    created: list[int]
    record_id: int | None


class MemoryOut(BaseModel):
    id: int
    external_id: str | None
    content: str
    type: str
    tags: list[str]
    importance: int
    event_time: str
    session_id: str | None
    metadata: dict[str, Any]


class MemoryDetailOut(MemoryOut):
    namespace: str
    status: str
    pinned: bool
    source: str
    base_importance: float
    access_count: int
    last_accessed: str | None
    created_at: str
    updated_at: str


class HitOut(MemoryOut):
    score: float
    breakdown: dict[str, float]
    via: str


class SearchOut(BaseModel):
    hits: list[HitOut]
    degraded: list[str]


class RecordOut(BaseModel):
    id: int
    job: str
    namespace: str
    status: str
    started_at: str
    finished_at: str | None


class HistoryOut(BaseModel):
    memory_id: int
    records: list[RecordOut]


class HealthOut(BaseModel):
    status: str
    database: str
    outbox: int | None


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422)
}


# -- ingest ------------------------------------------------------------------------------------


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    one = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"anyOf": [one, {"type": "array", "items": one}]}}
            },
        }
    }


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would store values no response can carry.
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf: as unrepresentable as Infinity itself
        raise ValueError(f"the number {text} is out of range")
    return value


def parse_batch(body: bytes) -> tuple[list[Any], list[str] | None]:
    """Given a request body, return its items and their labels (None: one object, "item N").

    Raise ApiError 400 if the body is not JSON, 422 if it is neither an object nor an array.
    """
    try:
        data = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "the body is not valid JSON", [("body", str(exc))]) from None
    if isinstance(data, dict):
        return [data], ["body"]
    if isinstance(data, list):
        if not data:
            raise ApiError(422, "nothing to store", [("body", "the array is empty")])
        return data, None
    raise ApiError(422, "invalid body", [("body", "expected a JSON object or an array of objects")])


def _add_out(result: AddResult, response: Response) -> dict[str, Any]:
    # 201 when something was created; a re-post of known items is a 200 with created=[].
    response.status_code = 201 if result.created else 200
    return {"ids": list(result.ids), "created": list(result.created), "record_id": result.record_id}


def _ingest(
    state: ApiState, kind: type[MemoryIn] | type[LogIn], namespace: str, body: bytes
) -> AddResult:
    items, labels = parse_batch(body)
    now = state.clock()
    # A timestamp whose UTC conversion leaves year 1..9999 (e.g. 9999-12-31T23:00-05:00) is a
    # validation problem of its item (secretary.clock.ensure_utc raises ValueError).
    if kind is MemoryIn:
        return state.store.add_memories(namespace, items, now=now, labels=labels)
    return state.store.add_logs(namespace, items, now=now, labels=labels)


def _add_ingest_routes(app: FastAPI) -> None:
    responses: dict[int | str, dict[str, Any]] = {
        **ERRORS,
        200: {"model": AddOut, "description": "Every item existed already: nothing created."},
    }

    @app.post(
        "/v1/memories",
        status_code=201,
        response_model=AddOut,
        responses=responses,
        openapi_extra=_body_schema(MemoryIn),
        summary="Store one memory or a batch (idempotent)",
    )
    async def post_memories(
        request: Request,
        response: Response,
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, MemoryIn, ns, body)
        logger.debug("{} stored {} new memories in {}", caller.name, len(result.created), ns)
        state.metrics.memories_ingested.inc(len(result.created))
        if result.created:
            state.worker.kick()
        return _add_out(result, response)

    @app.post(
        "/v1/logs",
        status_code=201,
        response_model=AddOut,
        responses=responses,
        openapi_extra=_body_schema(LogIn),
        summary="Store one conversation log line or a batch (idempotent)",
    )
    async def post_logs(
        request: Request,
        response: Response,
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, LogIn, ns, body)
        state.metrics.logs_ingested.inc(len(result.created))
        return _add_out(result, response)


# -- search ------------------------------------------------------------------------------------

TypeName = Annotated[str, StringConstraints(pattern=TYPE_PATTERN)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=256)]


def parse_meta(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Given ``key=value`` strings, return (key, value) pairs. Raise ApiError 422 if malformed."""
    out: list[tuple[str, str]] = []
    problems: list[tuple[str, str]] = []
    for index, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            problems.append((f"query.meta.{index}", f"expected key=value, got {pair!r}"))
        else:
            out.append((key, value))
    if problems:
        raise ApiError(422, "invalid request", problems)
    return tuple(out)


def _utc_bound(name: str, value: datetime | None) -> datetime | None:
    try:
        return None if value is None else ensure_utc(value)
    except ValueError:
        raise ApiError(422, "invalid request", [(f"query.{name}", "out of range")]) from None


def make_filters(
    *,
    types: Sequence[str],
    tags: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    meta: Sequence[str],
) -> SearchFilters:
    """Build the search filters from query parameters. Raise ApiError 422 if inconsistent."""
    start, end = _utc_bound("since", since), _utc_bound("until", until)
    if start is not None and end is not None and start > end:
        raise ApiError(422, "invalid request", [("query.since", "is after until")])
    return SearchFilters(
        types=tuple(types), tags=tuple(tags), since=start, until=end, metadata=parse_meta(meta)
    )


def _add_search_route(app: FastAPI, max_k: int) -> None:
    @app.get(
        "/v1/search",
        response_model=SearchOut,
        responses={**ERRORS, 503: {"model": ErrorOut}},
        summary="Search a namespace's memories",
    )
    def search(
        state: State,
        caller: Caller,
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
        namespace: NamespaceParam = None,
        k: Annotated[int, Query(ge=1, le=max_k)] = min(10, max_k),
        type_: Annotated[list[TypeName] | None, Query(alias="type")] = None,
        tag: Annotated[list[Tag] | None, Query()] = None,
        since: Annotated[datetime | None, Query(description="ISO-8601")] = None,
        until: Annotated[datetime | None, Query(description="ISO-8601")] = None,
        meta: Annotated[list[str] | None, Query(description="key=value, exact match")] = None,
        min_score: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        reinforce: bool = True,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        if not q.strip():
            raise ApiError(422, "invalid request", [("query.q", "is blank")])
        filters = make_filters(
            types=type_ or (), tags=tag or (), since=since, until=until, meta=meta or ()
        )
        request = SearchRequest(
            namespace=ns, query=q, k=k, filters=filters, min_score=min_score, reinforce=reinforce
        )
        now = state.clock()
        try:
            result = state.store.searcher.search(request, now=now)
        except VectorIndexError as exc:
            raise ApiError(503, "the vector index is unavailable", [("index", str(exc))]) from None
        state.metrics.searches.inc()
        if reinforce and result.hits:
            state.reinforcer.record((hit.memory.id for hit in result.hits), now)
        return {"hits": [hit_json(hit) for hit in result.hits], "degraded": list(result.degraded)}


# -- memories by id ----------------------------------------------------------------------------


def _readable_namespace(caller: Principal, namespace: str | None, memory_id: int) -> str:
    """Like choose_namespace, but a forbidden namespace looks exactly like a missing memory."""
    try:
        return choose_namespace(caller, namespace)
    except ApiError as exc:
        if exc.status == 403:
            raise memory_not_found(memory_id) from None
        raise


def _record_view(record: MaintenanceRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "job": record.job,
        "namespace": record.namespace,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }


def _add_memory_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/memories/{memory_id}",
        response_model=MemoryDetailOut,
        responses=ERRORS,
        summary="One memory",
    )
    def get_memory(
        state: State, caller: Caller, memory_id: MemoryId, namespace: NamespaceParam = None
    ) -> dict[str, Any]:
        ns = _readable_namespace(caller, namespace, memory_id)
        memory = state.store.repository.get_memory(ns, memory_id)
        if memory is None:
            raise memory_not_found(memory_id)
        return memory_json(memory, detail=True)

    @app.get(
        "/v1/memories/{memory_id}/history",
        response_model=HistoryOut,
        responses=ERRORS,
        summary="The maintenance records that touched a memory, oldest first",
    )
    def get_history(
        state: State, caller: Caller, memory_id: MemoryId, namespace: NamespaceParam = None
    ) -> dict[str, Any]:
        ns = _readable_namespace(caller, namespace, memory_id)
        if state.store.repository.get_memory(ns, memory_id) is None:
            raise memory_not_found(memory_id)
        records = state.store.repository.memory_history(ns, memory_id)
        return {"memory_id": memory_id, "records": [_record_view(r) for r in records]}


# -- operations --------------------------------------------------------------------------------


def _add_operational_routes(app: FastAPI) -> None:
    @app.get(
        "/healthz",
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
        summary="Liveness and database reachability (no key needed)",
    )
    def healthz(state: State, response: Response) -> dict[str, Any]:
        try:
            outbox = state.store.repository.outbox_size()
        except SQLAlchemyError as exc:
            logger.warning("health check: the database is unreachable: {}", exc)
            response.status_code = 503
            return {"status": "error", "database": "unreachable", "outbox": None}
        state.metrics.outbox.set(outbox)
        return {"status": "ok", "database": "ok", "outbox": outbox}

    @app.get("/metrics", summary="Prometheus metrics (no key needed)", response_class=Response)
    def metrics(state: State) -> Response:
        try:
            state.metrics.outbox.set(state.store.repository.outbox_size())
        except SQLAlchemyError as exc:
            logger.warning("metrics: cannot read the outbox size: {}", exc)
        state.metrics.reinforcement_pending.set(state.reinforcer.pending)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


# -- the app -----------------------------------------------------------------------------------


def create_app(
    store: Store, *, clock: Callable[[], datetime] = utc_now, start_workers: bool = True
) -> FastAPI:
    """Build the API over a store. The lifespan starts the background threads (unless
    ``start_workers`` is false) and, on shutdown, stops them and flushes reinforcement.
    """
    state = ApiState(
        store=store,
        clock=clock,
        reinforcer=Reinforcer(store.repository, store.settings.reinforcement),
        worker=IndexWorker(lambda: store.indexer.sync()),
        metrics=Metrics(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            state.reinforcer.start()
            state.worker.start()
        try:
            yield
        finally:
            logger.info("API shutting down: stopping workers and flushing reinforcement")
            state.worker.close()
            state.reinforcer.close()

    app = FastAPI(title="memory-secretary", version="1", lifespan=lifespan)
    app.state.secretary = state
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    _install_error_handlers(app)
    _add_ingest_routes(app)
    _add_search_route(app, store.settings.api.max_k)
    _add_memory_routes(app)
    _add_operational_routes(app)
    app.include_router(records_router)
    return app


class _InterceptHandler(logging.Handler):
    """Sends uvicorn's standard-library log records to loguru."""

    def emit(self, record: logging.LogRecord) -> None:
        level: str | int = record.levelno
        if record.levelname in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            level = record.levelname
        logger.opt(exception=record.exc_info).log(level, "{}: {}", record.name, record.getMessage())


def _route_uvicorn_logs() -> None:
    handler = _InterceptHandler()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        std = logging.getLogger(name)
        std.handlers = [handler]
        std.propagate = False


def serve(store: Store) -> None:
    """Run the API with uvicorn on ``api.host:api.port`` (127.0.0.1 unless configured)."""
    settings = store.settings.api
    _route_uvicorn_logs()
    logger.info("serving the API on http://{}:{}", settings.host, settings.port)
    uvicorn.run(
        create_app(store),
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=10,
    )
