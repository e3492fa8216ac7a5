"""The app: its state, middleware, error handlers and routes; the lifespan; serving it."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

import uvicorn
from fastapi import Depends, FastAPI
from loguru import logger

from store.api.body import BodyGuard
from store.api.console.app import create_console
from store.api.console.mount import ConsoleMount
from store.api.console.ops import ConsoleOps
from store.api.deps import ApiState
from store.api.errors import install_error_handlers
from store.api.metrics import Metrics, MetricsMiddleware
from store.api.openapi import install_openapi, single_valued_query
from store.api.routes_dream import add_dream_routes
from store.api.routes_edits import add_edit_routes
from store.api.routes_ingest import add_ingest_routes
from store.api.routes_listing import add_listing_routes
from store.api.routes_memories import add_memory_routes
from store.api.routes_ops import add_operational_routes
from store.api.routes_records import add_record_routes
from store.api.routes_search import add_search_route
from store.api.routes_status import add_status_route
from store.clock import utc_now
from store.coordination.dream_worker import Dreamer, DreamWorker
from store.service import Store
from store.status import UNKNOWN, StatusConfig
from store.status.job_metrics import JobMetrics
from store.vector.workers import IndexWorker, Warmer, settle_heap


def create_app(
    store: Store,
    *,
    clock: Callable[[], datetime] = utc_now,
    start_workers: bool = True,
    status: StatusConfig = UNKNOWN,
    dreamer: Dreamer | None = None,
    console: ConsoleOps | None = None,
    settle: bool = False,
) -> FastAPI:
    """Build the API over a store. The lifespan starts the background threads (unless
    ``start_workers`` is false) and, on shutdown, stops them and flushes reinforcement;
    with ``settle``, the process's heap is settled after the warm-up (``settle_heap``: for
    the process that serves, not for tests that build many apps).
    ``status`` tells /v1/status and /metrics the jobs and the daily token budget. ``dreamer``
    names the jobs POST /v1/dream may ask for and, if it can run them (``dreamer.run``), makes
    this process run the queued requests while no daemon does. ``console`` gives the web
    console at /ui the secretary's approval and schedule (without it they are read-only).
    """
    state = ApiState(
        store=store,
        clock=clock,
        reinforcer=store.reinforcer,
        worker=IndexWorker(store.sync_index),
        warmer=Warmer(store.warm_namespaces, store.warm_up, then=settle_heap if settle else None),
        metrics=Metrics(),
    )
    dreams = (
        DreamWorker(store.db.dream_requests, dreamer, engine=store.engine, clock=clock)
        if dreamer is not None and dreamer.run is not None and start_workers
        else None
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            state.reinforcer.start()
            state.worker.start()
            state.warmer.start()
            if dreams is not None:
                dreams.start()
        try:
            yield
        finally:
            logger.info("API shutting down: stopping workers and flushing reinforcement")
            if dreams is not None:
                dreams.close()
            state.warmer.close()
            state.worker.close()
            state.reinforcer.close()

    app = FastAPI(
        title="memory-secretary",
        version="1",
        lifespan=lifespan,
        dependencies=[Depends(single_valued_query)],
    )
    app.state.secretary = state
    app.state.status_config = status
    state.metrics.registry.register(JobMetrics(store.db, status, clock))
    # Metrics outermost, so that bodies the guard refuses are counted too.
    app.add_middleware(
        BodyGuard, max_bytes=store.settings.api.max_body_bytes, keys=store.settings.api.keys
    )
    # The console's forms are not JSON: they reach it before the body guard (it checks its own).
    ui = create_console(store, clock=clock, status=status, ops=console)
    app.add_middleware(ConsoleMount, console=ui)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_error_handlers(app)
    install_openapi(app, keyed=bool(store.settings.api.keys), limits=store.limits)
    add_ingest_routes(app)
    add_search_route(app, store.settings.api.max_k)
    add_memory_routes(app)
    add_edit_routes(app)
    add_listing_routes(app)
    add_operational_routes(app)
    add_status_route(app)
    add_dream_routes(app, dreamer)
    add_record_routes(app)
    return app


def serve(
    store: Store,
    *,
    status: StatusConfig = UNKNOWN,
    dreamer: Dreamer | None = None,
    console: ConsoleOps | None = None,
) -> None:
    """Run the API with uvicorn on ``api.host:api.port`` (127.0.0.1 unless configured).

    uvicorn installs no logging of its own (``log_config=None``): its loggers propagate to the
    root handler that secretary.logs.configure installs, which hands them to loguru.
    """
    settings = store.settings.api
    logger.info("serving the API on http://{}:{}", settings.host, settings.port)
    uvicorn.run(
        create_app(store, status=status, dreamer=dreamer, console=console, settle=True),
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=10,
    )
