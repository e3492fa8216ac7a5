"""POST /v1/dream and GET /v1/dream/{id}: ask for the maintenance jobs to run now, and follow it.

POST queues a request (``store.coordination.dream_requests``) and answers 202 at once: the
running daemon picks it up within ``schedule.poll_seconds``; under `secretary serve` the app's own
``DreamWorker`` does, while no daemon runs. A requested run goes ahead where a job backs off after
failed runs (its outcome says it overrode the back-off). The store cannot import the jobs, so the
job names a request may use come from the ``Dreamer`` that ``create_app`` is given.

A key may ask only for its namespaces: another one is refused as if it did not exist (404), and
no namespace means each of the key's namespaces (one request each), or every namespace with work
when the API has no keys.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, FastAPI, Path
from pydantic import BaseModel, ConfigDict, Field

from store.api.auth import Principal
from store.api.deps import MAX_ID, Caller, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import Dreamer
from store.coordination.leases import live_daemons
from store.shapes.dreams import request_json

RequestId = Annotated[int, Path(ge=1, le=MAX_ID)]


class DreamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=32,
        description="Only these jobs, run in the usual order (default: every job).",
    )
    retry_quarantined: bool = Field(
        default=False, description="Send the items quarantined after failed runs again."
    )


class DreamAcceptedOut(BaseModel):
    id: int  # the first request; the only one unless the key has several namespaces
    ids: list[int]
    daemon_running: bool
    # Why the dream will do less than asked: this server runs it (no daemon runs) and has no
    # model for the jobs that need one.
    note: str | None = None


class DreamOutcomeOut(BaseModel):
    job: str
    namespace: str
    status: str
    record_id: int | None
    records: list[int] = Field(default_factory=list)  # every record the run wrote
    message: str


class DreamRequestOut(BaseModel):
    id: int
    namespace: str | None  # null: every namespace with work
    jobs: list[str]  # empty: every job
    retry_quarantined: bool
    requested_by: str
    requested_at: str
    status: str  # pending, running, done, failed
    picked_by: str | None
    started_at: str | None
    finished_at: str | None
    outcomes: list[DreamOutcomeOut]
    error: str | None


def _namespaces(caller: Principal, requested: str | None) -> list[str | None]:
    """The namespaces to queue a request for (None: every one with work). Raise 404 if the key
    may not use ``requested``."""
    if requested is not None:
        if not caller.allows(requested):
            raise ApiError(
                404,
                f"namespace {requested!r} does not exist",
                [("query.namespace", "no such namespace")],
            )
        return [requested]
    if caller.namespaces is None:
        return [None]
    return list(caller.namespaces)


def _not_found(request_id: int) -> ApiError:
    return ApiError(
        404,
        f"dream request {request_id} does not exist",
        [("path.request_id", "no such request")],
    )


def _visible(caller: Principal, request: DreamRequestView) -> bool:
    if caller.namespaces is None:
        return True
    return request.namespace is not None and caller.allows(request.namespace)


def add_dream_routes(app: FastAPI, dreamer: Dreamer | None) -> None:
    known = dreamer.jobs if dreamer is not None else None

    @app.post(
        "/v1/dream",
        status_code=202,
        response_model=DreamAcceptedOut,
        responses=ERRORS,
        summary="Run the maintenance jobs now: queue a request for the daemon",
    )
    def post_dream(
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
        body: Annotated[DreamIn | None, Body()] = None,
    ) -> dict[str, Any]:
        wanted = body or DreamIn()
        unknown = [job for job in wanted.jobs if known is not None and job not in known]
        if unknown:
            problems = [("body.jobs", f"unknown job {job!r}") for job in unknown]
            raise ApiError(422, f"unknown job(s); known: {', '.join(known or ())}", problems)
        now = state.clock()
        ids = [
            state.store.db.dream_requests.enqueue(
                namespace=target,
                jobs=wanted.jobs,
                retry_quarantined=wanted.retry_quarantined,
                requested_by=f"api:{caller.name}",
                now=now,
            )
            for target in _namespaces(caller, namespace)
        ]
        running = bool(live_daemons(state.store.engine, now))
        # A running daemon takes the request with its own configuration: nothing to say of it.
        runs_here = dreamer is not None and dreamer.run is not None and not running
        note = dreamer.unable if runs_here and dreamer else None
        return {"id": ids[0], "ids": ids, "daemon_running": running, "note": note}

    @app.get(
        "/v1/dream/{request_id}",
        response_model=DreamRequestOut,
        responses=ERRORS,
        summary="A dream request: its status and, once done, the outcome of each run",
    )
    def get_dream(state: State, caller: Caller, request_id: RequestId) -> dict[str, Any]:
        request = state.store.db.dream_requests.get(request_id)
        if request is None or not _visible(caller, request):
            raise _not_found(request_id)
        return request_json(request)
