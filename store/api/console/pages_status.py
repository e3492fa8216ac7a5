"""Status: the daemons and what each runs, the night's open firings, the schedule (pause,
resume, a new cron expression previewed before saving), each namespace's jobs with their backlog,
today's tokens against the budget, and "Dream now" per namespace with the recent dream requests.

The status is ``store.status.read_status`` (GET /v1/status); schedule changes go through the
secretary's validation (``ConsoleOps``) into ``store.coordination.schedules`` as `secretary
schedule` does. The schedule is the whole store's: only a viewer who may use every namespace
changes it. "Dream now" queues a request as `POST /v1/dream` does
(``store.coordination.dream_requests``), which the running daemon, or `secretary serve`'s own
worker while none runs, picks up within seconds; the page's script (``static/dream.js``) follows
an unfinished request through ``/ui/status/dreams/ID`` and shows each run as it ends.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from store.api.auth import Principal
from store.api.console.web import (
    PageNotFound,
    check_namespace,
    checked_form,
    console,
    page,
    said,
    see_other_saying,
    viewer,
)
from store.coordination.dream_requests import DreamRequestView
from store.errors import SecretaryError
from store.shapes.dreams import run_json
from store.status import read_status
from store.status.shape import status_json

router = APIRouter()
PREVIEW = 5
RECENT_DREAMS = 10  # dream requests listed on the status page


def may_schedule(request: Request, who: Principal) -> bool:
    """True if the viewer may use every namespace the store holds (the schedule is theirs)."""
    if who.namespaces is None:
        return True
    held = console(request).store.db.memories.namespaces()
    return set(held) <= set(who.namespaces)


@router.get("/ui/status")
def status(request: Request) -> Response:
    here, who = console(request), viewer(request)
    now = here.clock()
    found = read_status(here.store.db, here.status, now=now, namespaces=who.namespaces)
    shown = status_json(found)
    schedule = here.ops.schedule(now, 3) if here.ops is not None else None
    budget = shown["budget"]["max_tokens_per_day"]
    shares = {
        n["namespace"]: min(100, round(n["tokens_today"] * 100 / budget)) if budget else 0
        for n in shown["namespaces"]
    }
    context = {
        "title": "Status",
        "status": shown,
        "found": found,
        "shares": shares,
        "schedule": schedule,
        "timezone": here.ops.timezone if here.ops is not None else None,
        "may_schedule": here.ops is not None and may_schedule(request, who),
        "dreams": _recent_dreams(request, who),
        "message": said(request),
    }
    return page(request, "status.html", context)


def _recent_dreams(request: Request, who: Principal) -> list[dict[str, Any]]:
    """The newest dream requests the viewer may see (a scoped key: its namespaces' only)."""
    recent = console(request).store.db.dream_requests.recent(RECENT_DREAMS * 4)
    shown = [r for r in recent if _may_see(who, r)][:RECENT_DREAMS]
    return [{"request": r, "runs": [run_json(o) for o in r.outcomes]} for r in shown]


def _may_see(who: Principal, request: DreamRequestView) -> bool:
    if who.namespaces is None:
        return True
    return request.namespace is not None and who.allows(request.namespace)


@router.post("/ui/status/dream/{namespace}")
async def dream_now(request: Request, namespace: str) -> Response:
    """Queue a dream of every job on ``namespace``, as `POST /v1/dream` does."""
    await checked_form(request)
    who = viewer(request)
    check_namespace(who, namespace)
    here = console(request)
    request_id = here.store.db.dream_requests.enqueue(
        namespace=namespace,
        jobs=(),
        retry_quarantined=False,
        requested_by=f"console:{who.name}",
        now=here.clock(),
    )
    told = (
        f"dream request #{request_id} queued for {namespace}: the daemon (or this server, "
        "while no daemon runs) runs it within seconds, jobs that back off after failed runs "
        "included; its runs show below as they finish"
    )
    return see_other_saying(request, "/ui/status", told)


@router.get("/ui/status/dreams/{request_id}")
def dream_progress(request: Request, request_id: int) -> JSONResponse:
    """A dream request as the status page's script follows it: its status and runs so far."""
    who = viewer(request)
    found = console(request).store.db.dream_requests.get(request_id)
    if found is None or not _may_see(who, found):
        raise PageNotFound(f"dream request {request_id} does not exist")
    return JSONResponse(
        {
            "id": found.id,
            "status": found.status,
            "finished": found.finished,
            "error": found.error,
            "runs": [run_json(outcome) for outcome in found.outcomes],
        }
    )


def _scheduler(request: Request) -> None:
    here = console(request)
    if here.ops is None or not may_schedule(request, viewer(request)):
        raise PageNotFound("the schedule cannot be changed here")


@router.get("/ui/status/schedule/{job}")
def preview(request: Request, job: str, cron: str = "") -> Response:
    _scheduler(request)
    here = console(request)
    assert here.ops is not None
    known = {entry.job: entry for entry in here.ops.schedule(here.clock(), 1)}
    if job not in known:
        raise PageNotFound(f"no job {job!r}")
    shown, error = None, None
    if cron.strip():
        try:
            shown = here.ops.preview(cron, here.clock(), PREVIEW)
        except SecretaryError as exc:
            error = str(exc)
    context = {
        "title": f"Schedule of {job}",
        "job": known[job],
        "cron": cron,
        "preview": shown,
        "error": error,
        "timezone": here.ops.timezone,
    }
    return page(request, "schedule.html", context, status_code=422 if error else 200)


@router.post("/ui/status/schedule/{job}/{action}")
async def change(request: Request, job: str, action: str) -> Response:
    form = await checked_form(request)
    _scheduler(request)
    here = console(request)
    assert here.ops is not None
    now = here.clock()
    try:
        if action == "cron":
            normal = here.ops.set_cron(job, form.get("cron", ""), now)
            told = f"{job}: {normal} (stored; a running daemon applies it within seconds)"
        elif action in ("pause", "resume"):
            here.ops.set_paused(job, action == "pause", now)
            told = f"{job}: {'paused' if action == 'pause' else 'resumed'}"
        else:
            raise PageNotFound(f"no action {action!r}")
    except SecretaryError as exc:
        told = f"{job}: not changed: {exc}"
    return see_other_saying(request, "/ui/status", told)
