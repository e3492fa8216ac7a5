"""GET /healthz, /readyz and /metrics: the health of each part, readiness for traffic, and
Prometheus metrics (no key).

Both health endpoints are cheap enough to poll: one count of the outbox (which also tells that
the database answers) and the vector index's cached snapshot (``store.vector.health``: the API's
index worker reaches Chroma, never a health request).

- ``/healthz``: 200 while the process and its database work, with each part's state and an
  overall ``status``: ``ok``, or ``degraded`` when the vector index is unreachable, being
  rebuilt, behind the outbox, or holds another number of vectors than SQL has memories
  (searches then answer from what they have and say so in ``degraded``). 503 with ``error``
  when the database cannot be reached: nothing can be served.
- ``/readyz``: as ``/healthz``, but also 503 until the start-up warm-up is done, so that a load
  balancer sends searches to a replica only once they are fast. A vector index problem does
  not make a replica unready: every replica shares the index, and each answers lexically.
"""

from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Response
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from store.api.deps import ApiState, State
from store.api.responses import HealthOut


def add_operational_routes(app: FastAPI) -> None:
    @app.get(
        "/healthz",
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
        summary="Health of the database, the vector index and the lexical index (no key needed)",
    )
    def healthz(state: State, response: Response) -> dict[str, Any]:
        code, body = health(state)
        response.status_code = code
        return body

    @app.get(
        "/readyz",
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
        summary="Ready for traffic: the database answers and the warm-up is done (no key needed)",
    )
    def readyz(state: State, response: Response) -> dict[str, Any]:
        code, body = health(state)
        response.status_code = code if body["warm"] else 503
        return body

    @app.get("/metrics", summary="Prometheus metrics (no key needed)", response_class=Response)
    def metrics(state: State) -> Response:
        try:
            state.metrics.outbox.set(state.store.db.work.outbox_size())
        except SQLAlchemyError as exc:
            logger.warning("metrics: cannot read the outbox size: {}", exc)
        state.metrics.reinforcement_pending.set(state.reinforcer.pending)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def health(state: ApiState) -> tuple[int, dict[str, Any]]:
    """Return the HTTP status and the report of each part, with the overall status."""
    warm = state.warmer.done.is_set()
    lexical = {"status": "warm" if warm else "warming", "warm": warm}
    index_status = state.store.index_status
    try:
        outbox = state.store.db.work.outbox_size()
    except SQLAlchemyError as exc:
        logger.warning("health check: the database is unreachable: {}", exc)
        vector = index_status.last()
        return 503, {
            "status": "error",
            "database": "unreachable",
            "vector_index": vector.report(),
            "lexical_index": lexical,
            "outbox": None,
            "warm": warm,
        }
    state.metrics.outbox.set(outbox)
    vector = replace(index_status.current(), outbox=outbox)  # the count just read
    return 200, {
        "status": "degraded" if vector.incomplete else "ok",
        "database": "ok",
        "vector_index": vector.report(),
        "lexical_index": lexical,
        "outbox": outbox,
        "warm": warm,
    }
