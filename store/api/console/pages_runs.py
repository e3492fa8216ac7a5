"""Overnight, one run with its diff and its undo (dry run first; force, or a cascade with the
later runs that depend on it, a second step), plans.

Undo calls ``store.write.undo`` as POST /v1/records/{id}/undo does; approve and reject call the
secretary's approval (``ConsoleOps``) as `secretary plans approve|reject` does.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response

from store.api.console.plan_text import plan_changes
from store.api.console.web import (
    PageNotFound,
    checked_form,
    console,
    page,
    said,
    see_other,
    see_other_saying,
    viewer,
)
from store.api.deps import RecordId
from store.changes import plural
from store.clock import parse_timestamp
from store.errors import NotFound, SecretaryError
from store.shapes.diff import record_diff
from store.shapes.records import (
    dropped_items,
    duration_seconds,
    outcome_badge,
    quarantined_ids,
    run_reason,
    summary,
)
from store.views import OperationView, RecordView
from store.write.undo import (
    AlreadyUndone,
    ForgetIsFinal,
    NothingToUndo,
    UndoConflict,
    UndoPlan,
    plan_cascade,
    plan_undo,
    undo,
)

router = APIRouter()

# Records a person's action or an ingest writes; the rest are the jobs' runs.
NOT_RUNS = frozenset({"ingest", "edit", "delete", "forget", "undo"})
MAX_RECORDS = 500
DEFAULT_HOURS = 24


def since_time(raw: str | None, now: datetime) -> datetime:
    """Given the form's time (ISO-8601; without an offset, UTC) and now, return where the
    night starts: that time, or DEFAULT_HOURS before now if there is none or it is not a time."""
    if raw:
        try:
            return parse_timestamp(raw)  # a naive time is read as UTC
        except ValueError:
            pass
    return now - timedelta(hours=DEFAULT_HOURS)


def _is_run(record: RecordView, jobs: frozenset[str]) -> bool:
    return record.job in jobs if jobs else record.job not in NOT_RUNS


@router.get("/ui/overnight")
def overnight(request: Request, since: str | None = None, every: str | None = None) -> Response:
    here, who = console(request), viewer(request)
    start = since_time(since, here.clock())
    jobs = frozenset(here.status.jobs)
    found = here.store.db.records.find(namespaces=who.namespaces, limit=MAX_RECORDS)
    shown = [
        r
        for r in found
        if r.started_at >= start and (every or _is_run(r, jobs)) and r.status != "planned"
    ]
    changes = here.store.db.records.change_counts(r.id for r in shown)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in shown:
        groups[record.namespace].append(_run_row(record, changes.get(record.id, {})))
    context = {
        "title": "Overnight",
        "since": start,
        "every": bool(every),
        "groups": sorted(groups.items()),
        "planned": len(_waiting(request)),
        # Records are read newest first up to MAX_RECORDS: say so when older ones were cut.
        "cut": len(found) == MAX_RECORDS and found[-1].started_at >= start,
        "max_records": MAX_RECORDS,
    }
    return page(request, "overnight.html", context)


def _run_row(record: RecordView, changes: dict[str, int]) -> dict[str, Any]:
    changed = {kind: n for kind, n in changes.items() if n}
    dropped = len(dropped_items(record.stats))
    quarantined = len(quarantined_ids(record.stats))
    said, badge = summary(record, changed), outcome_badge(record, changed, dropped)
    return {
        "record": record,
        "duration": duration_seconds(record),
        "changes": changed,
        "summary": said,
        "beside_badge": _beside(badge[0], said, dropped, quarantined),
        "outcome": badge,
        "tokens": record.tokens_in + record.tokens_out,
        "dropped": dropped,
        "quarantined": quarantined,
        "reason": run_reason(record.stats),
        "bad": record.status in ("failed", "refused") or record.error is not None,
        "warn": bool(quarantined) or (dropped and not changed),
    }


def _beside(badge: str, said: str, dropped: int, quarantined: int) -> str:
    """What a run page says after the outcome's badge: what the summary adds to it ("erased"
    then "1 memory (#59)", not "erased erased 1 memory"; nothing after "no changes"), then
    what was dropped and quarantined."""
    parts = [
        said.removeprefix(badge).lstrip(),
        f"dropped {plural(dropped, 'item')}" if dropped else "",
        f"quarantined {plural(quarantined, 'item')}" if quarantined else "",
    ]
    return "; ".join(part for part in parts if part)


def _record(request: Request, record_id: int) -> tuple[RecordView, list[OperationView]]:
    """The record if the viewer may see it. Raise PageNotFound otherwise (as if missing)."""
    here, who = console(request), viewer(request)
    try:
        return here.store.db.records.get(record_id, namespaces=who.namespaces)
    except NotFound:
        raise PageNotFound(f"record {record_id} does not exist") from None


@router.get("/ui/runs/{record_id}")
def run_page(request: Request, record_id: RecordId, undone_by: int | None = None) -> Response:
    record, operations = _record(request, record_id)
    memories = console(request).store.db.memories
    diff = record_diff(record, operations, lambda ids: memories.texts(record.namespace, ids))
    context = {
        "title": f"Run #{record.id}",
        "record": record,
        "row": _run_row(record, dict(diff.changes)),
        "diff": diff,
        "dropped": dropped_items(record.stats),
        "undone_by": undone_by,
        "undone_with": _undone_with(request, record),
    }
    return page(request, "run.html", context)


def _undone_with(request: Request, record: RecordView) -> list[int]:
    """The runs undone in the same step as ``record`` (a cascade), newest first."""
    undoers = console(request).store.db.records.many(filter(None, [record.undone_by_id]))
    together = {i for u in undoers for i in (u.undoes_id, *u.stats.get("cascade", ())) if i}
    return sorted(together - {record.id}, reverse=True)


def _undo_page(
    request: Request, record: RecordView, title: str, *, status_code: int = 200, **context: Any
) -> Response:
    """The undo page: a plan with its dependents, a cascade's parts, or why it was refused."""
    parts: tuple[UndoPlan, ...] = context.get("parts") or ()
    runs = {r.id: r for r in console(request).store.db.records.many(p.record_id for p in parts)}
    shown = {"plan": None, "error": None, "blocked": None, "cascading": None, **context}
    shown |= {"parts": parts, "runs": runs}
    shown |= {"title": title, "record": record}
    return page(request, "undo.html", shown, status_code=status_code)


@router.get("/ui/runs/{record_id}/undo")
def undo_preview(request: Request, record_id: RecordId, cascade: bool = False) -> Response:
    """The dry run; with ``cascade``, of the undo with the later runs that depend on it."""
    record, _ = _record(request, record_id)
    here, title = console(request), f"Undo run #{record_id}?"
    try:
        plan = plan_undo(here.store.db.writer, record_id)
    except (AlreadyUndone, ForgetIsFinal, NothingToUndo) as exc:
        return _undo_page(request, record, title, error=str(exc))
    if not (cascade and plan.conflicts):
        return _undo_page(request, record, title, plan=plan, cascading=_cascading(request, plan))
    try:
        parts = plan_cascade(here.store.db.writer, record_id, now=here.clock()).parts
    except UndoConflict as exc:  # a cascade cannot resolve it: say which run blocks it
        return _undo_page(request, record, title, plan=plan, blocked=exc)
    title = f"Undo run #{record_id} with its {plural(len(parts) - 1, 'dependent run')}?"
    return _undo_page(request, record, title, parts=parts)


def _cascading(request: Request, plan: UndoPlan) -> int | None:
    """How many later runs a cascade would undo with the plan's record: its dependents and
    theirs, which the plan alone does not list. None when there is no cascade to offer."""
    if not plan.dependents or any(d.final for d in plan.dependents):
        return None
    here = console(request)
    try:
        parts = plan_cascade(here.store.db.writer, plan.record_id, now=here.clock()).parts
    except UndoConflict:
        return None  # the cascade page says why
    return len(parts) - 1


@router.post("/ui/runs/{record_id}/undo")
async def undo_run(request: Request, record_id: RecordId) -> Response:
    form = await checked_form(request)
    record, _ = _record(request, record_id)
    here = console(request)
    force, cascade = form.get("force") == "yes", form.get("cascade") == "1"
    try:
        done = undo(here.store.db.writer, record_id, now=here.clock(), force=force, cascade=cascade)
    except UndoConflict as exc:
        plan = plan_undo(here.store.db.writer, record_id)
        parts = plural(len(exc.conflicts), "part")
        error = f"Nothing was written: {parts} conflict with later changes."
        blocked = exc if cascade else None  # else the plan names the runs that depend on it
        return _undo_page(
            request,
            record,
            "Undo refused",
            plan=plan,
            error=error,
            blocked=blocked,
            cascading=None if cascade else _cascading(request, plan),
            status_code=409,
        )
    except NothingToUndo as exc:  # not a refusal: nothing was written, nothing had to be
        return _undo_page(request, record, "Nothing to undo", error=str(exc))
    except (AlreadyUndone, ForgetIsFinal) as exc:
        return _undo_page(request, record, "Undo refused", error=str(exc), status_code=409)
    return see_other(f"/ui/runs/{record_id}?undone_by={done.record_id}")


# -- plans awaiting approval ---------------------------------------------------------------------


def _waiting(request: Request) -> list[dict[str, Any]]:
    """The viewer's plans awaiting approval (with the cap's refusals, when the secretary says
    which those are), oldest first, each with its changes in words."""
    here, who = console(request), viewer(request)
    records = here.store.db.records
    waiting = records.planned() if here.ops is None else records.many(here.ops.pending())
    out = []
    for record in sorted(waiting, key=lambda r: r.id):
        if who.allows(record.namespace):
            lookup = partial(here.store.db.memories.texts, record.namespace)
            out.append({"record": record, "changes": plan_changes(record.stats, lookup)})
    return out


@router.get("/ui/plans")
def plans(request: Request) -> Response:
    return _plans_page(request, message=said(request))


def _plans_page(
    request: Request, *, message: str | None = None, refused: tuple[int, str] | None = None
) -> Response:
    """The plans awaiting approval, after ``message``, or after a decision on a plan that was
    refused (its id and why: an error, 409)."""
    context = {
        "title": "Plans awaiting approval",
        "plans": _waiting(request),
        "can_decide": console(request).ops is not None,
        "message": message,
        "refused": refused,
    }
    return page(request, "plans.html", context, status_code=409 if refused else 200)


@router.post("/ui/plans/{record_id}/{decision}")
async def decide(request: Request, record_id: RecordId, decision: str) -> Response:
    await checked_form(request)
    _record(request, record_id)  # 404 for another namespace's record, as for a missing one
    here = console(request)
    if here.ops is None or decision not in ("approve", "reject"):
        raise PageNotFound("approval is not available here")
    act = here.ops.approve if decision == "approve" else here.ops.reject
    try:
        message = act(record_id, here.clock())
    except SecretaryError as exc:  # stale, or no longer pending: not a notice among others
        return _plans_page(request, refused=(record_id, str(exc)))
    return see_other_saying(request, "/ui/plans", message)
