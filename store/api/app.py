"""The app: its state, middleware, error handlers and routes; the lifespan; serving it."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

import uvicorn
from fastapi import FastAPI
from loguru import logger

from secretary.clock import utc_now
from store.api.deps import ApiState
from store.api.errors import install_error_handlers
from store.api.metrics import Metrics, MetricsMiddleware
from store.api.records import router as records_router
from store.api.routes_ingest import add_ingest_routes
from store.api.routes_memories import add_memory_routes
from store.api.routes_ops import add_operational_routes
from store.api.routes_search import add_search_route
from store.reinforcement import Reinforcer
from store.service import Store
from store.workers import IndexWorker, Warmer


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
        warmer=Warmer(store.warm_namespaces, store.warm_up),
        metrics=Metrics(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            state.reinforcer.start()
            state.worker.start()
            state.warmer.start()
        try:
            yield
        finally:
            logger.info("API shutting down: stopping workers and flushing reinforcement")
            state.warmer.close()
            state.worker.close()
            state.reinforcer.close()

    app = FastAPI(title="memory-secretary", version="1", lifespan=lifespan)
    app.state.secretary = state
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_error_handlers(app)
    add_ingest_routes(app)
    add_search_route(app, store.settings.api.max_k)
    add_memory_routes(app)
    add_operational_routes(app)
    app.include_router(records_router)
    return app


def serve(store: Store) -> None:
    """Run the API with uvicorn on ``api.host:api.port`` (127.0.0.1 unless configured).

    uvicorn installs no logging of its own (``log_config=None``): its loggers propagate to the
    root handler that secretary.logs.configure installs, which hands them to loguru.
    """
    settings = store.settings.api
    logger.info("serving the API on http://{}:{}", settings.host, settings.port)
    uvicorn.run(
        create_app(store),
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_graceful_shutdown=10,
    )
