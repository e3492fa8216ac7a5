"""Approval: plans stored as records wait for `secretary plans approve` or `reject`.

A run in approval mode stores its plan in a "planned" record (``plan_stats``); a plan the change
cap refused is kept the same way in its "refused" record, and may be approved too (as long as it
is its job's latest record in the namespace). Approving
re-checks what the plan names, then applies the plan and settles its record in one transaction,
so a crash leaves the plan either pending with nothing applied or applied and settled. A plan
that went stale is refused instead; a rejected one moves its job past it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loguru import logger

from secretary.config import Settings
from secretary.jobs.base import Change, Plan
from secretary.jobs.registry import get_job
from secretary.outcomes import RunOutcome, make_outcome, protected_targets
from store.changes import plural
from store.database import Database
from store.errors import NotFound, SecretaryError
from store.kinds import RecordStatus
from store.operations import decode_operation, encode_operation, referenced_ids
from store.service import Store
from store.views import RecordView
from store.write.record_info import RecordInfo, Settlement


class PlanNotFound(SecretaryError):
    def __init__(self, record_id: int) -> None:
        super().__init__(f"no pending plan with record id {record_id}")


class PlanRefused(SecretaryError):
    """An approval refused: what the plan names changed since it was made."""

    def __init__(self, record_id: int, reason: str) -> None:
        super().__init__(f"plan #{record_id} was refused and nothing was applied: {reason}")


@dataclass(frozen=True, kw_only=True)
class PendingPlan:
    """A plan stored for approval: its record, its changes and what it was planned against."""

    record_id: int
    job: str
    namespace: str
    planned_at: datetime
    changes: tuple[Change, ...]
    job_state: Mapping[str, Any] | None
    base_state: Mapping[str, Any]
    targets: Mapping[int, int]  # memory id -> version when planned
    stats: Mapping[str, Any]
    model: str | None = None
    prompts: Sequence[Mapping[str, Any]] = ()

    def as_plan(self) -> Plan:
        return Plan(
            job=self.job, namespace=self.namespace, changes=self.changes, job_state=self.job_state
        )


def plan_stats(db: Database, plan: Plan, *, base_state: Mapping[str, Any]) -> dict[str, Any]:
    """The plan as stored in its record, with the versions of the memories it names."""
    ids = referenced_ids(plan.operations)
    return {
        "changes": [
            {"label": c.label, "operations": [encode_operation(op) for op in c.operations]}
            | ({"lossless": True} if c.lossless else {})
            for c in plan.changes
        ],
        "job_state": dict(plan.job_state) if plan.job_state is not None else None,
        "base_state": dict(base_state),
        "targets": {str(m.id): m.version for m in db.memories.many(plan.namespace, ids)},
    }


# A pending plan's record has one of these statuses (a refused one only if the cap refused it).
PENDING = (RecordStatus.PLANNED, RecordStatus.REFUSED)


def pending_plans(db: Database, namespace: str | None = None) -> list[PendingPlan]:
    """Return the plans awaiting approval, and those the cap refused, oldest first."""
    planned = db.records.planned(namespace)
    namespaces = [namespace] if namespace is not None else None
    refused = [
        record
        for record in db.records.find(
            namespaces=namespaces, status=RecordStatus.REFUSED.value, limit=500
        )
        if _approvable_refusal(db, record)
    ]
    return [_pending(record) for record in sorted([*planned, *refused], key=lambda r: r.id)]


def get_pending(db: Database, record_id: int) -> PendingPlan:
    """Return one plan awaiting approval (or refused by the cap). Raise PlanNotFound if there
    is no such plan."""
    try:
        record, _ = db.records.get(record_id)
    except NotFound:
        raise PlanNotFound(record_id) from None
    if record.status != RecordStatus.PLANNED and not _approvable_refusal(db, record):
        raise PlanNotFound(record_id)
    return _pending(record)


def _approvable_refusal(db: Database, record: RecordView) -> bool:
    """A plan the change cap refused, still its job's latest record in the namespace."""
    if record.status != RecordStatus.REFUSED or record.stats.get("refused_by") != "cap":
        return False
    if "plan" not in record.stats:
        return False
    latest = db.records.find(namespaces=[record.namespace], job=record.job, limit=1)
    return bool(latest) and latest[0].id == record.id


def approve_plan(store: Store, settings: Settings, record_id: int, *, now: datetime) -> RunOutcome:
    """Apply a pending plan if nothing it names changed since planning; refuse it otherwise.

    Raise PlanNotFound if the record is not a pending plan (NotFound if it stopped being one
    while this ran: then nothing is applied).
    """
    db = store.db
    pending = get_pending(db, record_id)
    job = get_job(pending.job)
    reason = _stale_reason(db, settings, pending, now=now)
    if reason is not None:
        logger.warning("plan #{} is stale and was refused: {}", record_id, reason)
        _close(db, pending, now, RecordStatus.REFUSED, {"stale": reason})
        return make_outcome(job.name, pending.namespace, "refused", reason, record_id)
    plan = pending.as_plan()
    stats = {
        "approved_plan": record_id,
        "changes": len(plan.changes),
        "operations": len(plan.operations),
    }
    # Model and prompts say where the changes came from; the tokens stay on the planned
    # record, where they were spent, so that the day's budget counts them once.
    info = RecordInfo(model=pending.model, prompts=pending.prompts, stats=stats)
    applied = db.writer.apply(
        plan.namespace,
        job.name,
        plan.operations,
        now=now,
        info=info,
        job_state=plan.job_state,
        settle=Settlement(record_id=record_id, pending=PENDING),
    )
    message = f"plan #{record_id} applied ({plural(len(plan.changes), 'change')})"
    return make_outcome(
        job.name, pending.namespace, "applied", message, applied.record_id, stats, plan
    )


def reject_plan(store: Store, record_id: int, *, now: datetime) -> RunOutcome:
    """Drop a pending plan; the job moves past what it planned so it is not proposed again.

    Raise PlanNotFound if the record is not a pending plan.
    """
    pending = get_pending(store.db, record_id)
    job = get_job(pending.job)
    _close(store.db, pending, now, RecordStatus.REFUSED, {"rejected": True}, save_state=True)
    message = f"plan #{record_id} rejected"
    return make_outcome(job.name, pending.namespace, "refused", message, record_id)


def _pending(record: RecordView) -> PendingPlan:
    stats = dict(record.stats)
    data = stats.pop("plan", None) or {}
    changes = tuple(
        Change(
            label=str(item["label"]),
            operations=tuple(decode_operation(op) for op in item["operations"]),
            lossless=bool(item.get("lossless", False)),
        )
        for item in data.get("changes", [])
    )
    return PendingPlan(
        record_id=record.id,
        job=record.job,
        namespace=record.namespace,
        planned_at=record.started_at,
        changes=changes,
        job_state=data.get("job_state"),
        base_state=data.get("base_state", {}),
        targets={int(k): int(v) for k, v in data.get("targets", {}).items()},
        stats=stats,
        model=record.model,
        prompts=tuple(record.prompts),
    )


def _stale_reason(
    db: Database, settings: Settings, pending: PendingPlan, *, now: datetime
) -> str | None:
    """Why the plan may no longer be applied as planned, or None if it still may."""
    current = {m.id: m for m in db.memories.many(pending.namespace, pending.targets)}
    for memory_id, version in sorted(pending.targets.items()):
        memory = current.get(memory_id)
        if memory is None:
            return f"memory #{memory_id} no longer exists"
        if memory.version != version:
            return f"memory #{memory_id} changed since the plan was made"
    if dict(db.work.job_state(pending.job, pending.namespace)) != dict(pending.base_state):
        return f"job {pending.job} has moved on since the plan was made"
    plan = pending.as_plan()
    protected = protected_targets(db, plan.namespace, plan, settings.guardrails, now=now)
    if protected.dropped:
        return f"memories {list(protected.protected_hit)} are protected now"
    return None


def _close(
    db: Database,
    pending: PendingPlan,
    now: datetime,
    status: RecordStatus,
    note: Mapping[str, Any],
    *,
    save_state: bool = False,
) -> None:
    """Settle a pending plan's record unapplied (and, on rejection, move the job past it)."""
    # Through a unit for its namespace lock; it changes no memory, so its own record is dropped
    # and only the settled one remains.
    with db.writer.unit(pending.namespace, pending.job, now) as unit:
        try:
            unit.settle(
                Settlement(record_id=pending.record_id, status=status, note=note, pending=PENDING)
            )
        except NotFound:
            raise PlanNotFound(pending.record_id) from None
        current = unit.job_state(pending.job)
        if save_state and pending.job_state is not None and current == pending.base_state:
            unit.save_job_state(pending.job, pending.job_state)
