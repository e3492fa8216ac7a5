"""GET /v1/status: the daemons, the night's firings, the schedule, and per namespace its jobs.

The store does not know the jobs or the LLM budget: ``create_app`` is given them as a
``StatusConfig`` (the secretary's serve and run commands pass theirs) and keeps it on
``app.state.status_config``. A key sees only its namespaces (another key's namespace shows as
one with nothing in it, and counted, not named, in what a daemon runs); the rest shows to all.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import FastAPI, Query, Request
from pydantic import BaseModel, Field

from store.api.deps import Caller, State
from store.status import UNKNOWN, StatusConfig, read_status
from store.status.shape import status_json


class DaemonOut(BaseModel):
    running: bool
    holder: str | None
    since: str | None
    expires_at: str | None


class BudgetOut(BaseModel):
    # Tokens per namespace per UTC day; null when the API was not told (known: false), 0: none.
    max_tokens_per_day: int | None
    known: bool
    day: str


class ScheduleOut(BaseModel):
    job: str
    paused: bool
    next_fire_at: str | None
    last_fired_at: str | None
    last_finished_at: str | None
    firing: str
    interrupted: bool


class JobOut(BaseModel):
    job: str
    last: dict[str, Any] | None
    failures: int
    backoff_until: str | None
    backing_off: bool
    failing: int
    quarantined: int
    backlog: int | None
    backlog_by_watermark: dict[str, int] | None


class NamespaceOut(BaseModel):
    namespace: str
    tokens_today: int
    cost_today: float
    budget_reached: bool
    jobs: list[JobOut]


class StatusOut(BaseModel):
    now: str
    daemon: DaemonOut
    daemons: list[dict[str, Any]] = Field(description="each running daemon and what it runs")
    night: dict[str, Any] = Field(description="the open firings: units done, running, left")
    budget: BudgetOut
    schedule: list[ScheduleOut]
    namespaces: list[NamespaceOut]


def status_config(app: FastAPI) -> StatusConfig:
    return cast(StatusConfig, getattr(app.state, "status_config", UNKNOWN))


def add_status_route(app: FastAPI) -> None:
    @app.get(
        "/v1/status",
        response_model=StatusOut,
        summary="The daemons, the night's progress, the schedule, and each namespace's jobs",
    )
    def status(
        state: State,
        caller: Caller,
        request: Request,
        namespace: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    ) -> dict[str, Any]:
        shown = caller.namespaces
        if namespace is not None:
            shown = (namespace,) if caller.allows(namespace) else ()
        config = status_config(cast(FastAPI, request.app))
        return status_json(read_status(state.store.db, config, now=state.clock(), namespaces=shown))
