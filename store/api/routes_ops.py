"""GET /healthz and /metrics: liveness, database reachability and Prometheus metrics (no key)."""

from typing import Any

from fastapi import FastAPI, Response
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from store.api.deps import State
from store.api.responses import HealthOut


def add_operational_routes(app: FastAPI) -> None:
    @app.get(
        "/healthz",
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
        summary="Liveness and database reachability (no key needed)",
    )
    def healthz(state: State, response: Response) -> dict[str, Any]:
        warm = state.warmer.done.is_set()
        try:
            outbox = state.store.repository.outbox_size()
        except SQLAlchemyError as exc:
            logger.warning("health check: the database is unreachable: {}", exc)
            response.status_code = 503
            return {"status": "error", "database": "unreachable", "outbox": None, "warm": warm}
        state.metrics.outbox.set(outbox)
        return {"status": "ok", "database": "ok", "outbox": outbox, "warm": warm}

    @app.get("/metrics", summary="Prometheus metrics (no key needed)", response_class=Response)
    def metrics(state: State) -> Response:
        try:
            state.metrics.outbox.set(state.store.repository.outbox_size())
        except SQLAlchemyError as exc:
            logger.warning("metrics: cannot read the outbox size: {}", exc)
        state.metrics.reinforcement_pending.set(state.reinforcer.pending)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
