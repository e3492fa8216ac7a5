"""Approval: plans stored as records wait for `secretary plans approve` or `reject`.

A run in approval mode stores its plan in a "planned" record (``runner.plan_record_stats``).
Approving re-checks what the plan names, then applies the plan and settles its record in one
transaction, so a crash leaves the plan either pending with nothing applied or applied and
settled. A plan that went stale is refused instead; a rejected one moves its job past it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from loguru import logger
from sqlalchemy import select

from secretary.config import Settings
from secretary.jobs.base import Change, Plan, PlanNotFound, decode_changes
from secretary.jobs.runner import RunOutcome, get_job, make_outcome, protected_targets
from store.apply import RecordInfo, Resolution, apply_operations
from store.errors import NotFound
from store.models import JobState, MaintenanceRecord, RecordStatus
from store.repository import Repository

if TYPE_CHECKING:
    from store.service import Store


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


def pending_plans(repository: Repository, namespace: str | None = None) -> list[PendingPlan]:
    """Return the plans awaiting approval, oldest first."""
    query = select(MaintenanceRecord).where(MaintenanceRecord.status == RecordStatus.PLANNED.value)
    if namespace is not None:
        query = query.where(MaintenanceRecord.namespace == namespace)
    with repository.reading() as session:
        return [_pending(r) for r in session.scalars(query.order_by(MaintenanceRecord.id))]


def get_pending(repository: Repository, record_id: int) -> PendingPlan:
    """Return one plan awaiting approval. Raise PlanNotFound if there is no such plan."""
    with repository.reading() as session:
        record = session.get(MaintenanceRecord, record_id)
        if record is None or record.status != RecordStatus.PLANNED:
            raise PlanNotFound(record_id)
        return _pending(record)


def approve_plan(store: Store, settings: Settings, record_id: int, *, now: datetime) -> RunOutcome:
    """Apply a pending plan if nothing it names changed since planning; refuse it otherwise.

    Raise PlanNotFound if the record is not a pending plan (NotFound if it stopped being one
    while this ran: then nothing is applied).
    """
    repository = store.repository
    pending = get_pending(repository, record_id)
    job = get_job(pending.job)
    reason = _stale_reason(repository, settings, pending, now=now)
    if reason is not None:
        logger.warning("plan #{} is stale and was refused: {}", record_id, reason)
        _settle(repository, pending, now, RecordStatus.REFUSED, {"stale": reason})
        return make_outcome(job, pending.namespace, "refused", reason, record_id)
    plan = pending.as_plan()
    stats = {
        "approved_plan": record_id,
        "changes": len(plan.changes),
        "operations": len(plan.operations),
    }
    # Model and prompts say where the changes came from; the tokens stay on the planned
    # record, where they were spent, so that the day's budget counts them once.
    info = RecordInfo(model=pending.model, prompts=pending.prompts, stats=stats)
    applied = apply_operations(
        repository,
        plan.namespace,
        job.name,
        plan.operations,
        now=now,
        info=info,
        job_state=plan.job_state,
        # Kept even if every operation turns out a no-op: the planned record points at it.
        keep_empty_record=True,
        resolve=Resolution(record_id=record_id),
    )
    message = f"plan #{record_id} applied ({len(plan.changes)} change(s))"
    return make_outcome(job, pending.namespace, "applied", message, applied.record_id, stats, plan)


def reject_plan(store: Store, record_id: int, *, now: datetime) -> RunOutcome:
    """Drop a pending plan; the job moves past what it planned so it is not proposed again.

    Raise PlanNotFound if the record is not a pending plan.
    """
    repository = store.repository
    pending = get_pending(repository, record_id)
    job = get_job(pending.job)
    _settle(repository, pending, now, RecordStatus.REFUSED, {"rejected": True}, save_state=True)
    return make_outcome(job, pending.namespace, "refused", f"plan #{record_id} rejected", record_id)


def _pending(record: MaintenanceRecord) -> PendingPlan:
    stats = dict(record.stats or {})
    data = stats.pop("plan", None) or {}
    return PendingPlan(
        record_id=record.id,
        job=record.job,
        namespace=record.namespace,
        planned_at=record.started_at,
        changes=decode_changes(data.get("changes", [])),
        job_state=data.get("job_state"),
        base_state=data.get("base_state", {}),
        targets={int(k): int(v) for k, v in data.get("targets", {}).items()},
        stats=stats,
        model=record.model,
        prompts=tuple(record.prompts or ()),
    )


def _stale_reason(
    repository: Repository, settings: Settings, pending: PendingPlan, *, now: datetime
) -> str | None:
    """Why the plan may no longer be applied as planned, or None if it still may."""
    current = {m.id: m for m in repository.memories(pending.namespace, pending.targets)}
    for memory_id, version in sorted(pending.targets.items()):
        memory = current.get(memory_id)
        if memory is None:
            return f"memory #{memory_id} no longer exists"
        if memory.version != version:
            return f"memory #{memory_id} changed since the plan was made"
    if dict(repository.job_state(pending.job, pending.namespace)) != dict(pending.base_state):
        return f"job {pending.job} has moved on since the plan was made"
    plan = pending.as_plan()
    protected = protected_targets(repository, plan.namespace, plan, settings.guardrails, now=now)
    if protected:
        return f"memories {sorted(protected)} are protected now"
    return None


def _settle(
    repository: Repository,
    pending: PendingPlan,
    now: datetime,
    status: str,
    note: Mapping[str, Any],
    *,
    save_state: bool = False,
) -> None:
    """Settle a pending plan's record unapplied (and, on rejection, move the job past it)."""
    # Through a change transaction for its namespace lock; it changes no memory, so its own
    # record is dropped and only the settled one remains.
    with repository.changing(pending.namespace, pending.job, now) as (session, _changes):
        try:
            repository.resolve_record(
                session, pending.record_id, status=status, stats_update=note, now=now
            )
        except NotFound:
            raise PlanNotFound(pending.record_id) from None
        row = session.get(JobState, (pending.job, pending.namespace))
        current = dict(row.state) if row is not None else {}
        if save_state and pending.job_state is not None and current == pending.base_state:
            repository.save_job_state(
                session, pending.job, pending.namespace, pending.job_state, now=now
            )
