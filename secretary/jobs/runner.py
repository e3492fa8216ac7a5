"""Running a job: plan, guardrails, then apply (or store the plan for approval), with its record.

``run_job`` is the job boundary, the one broad catch: a run that raises is recorded as failed
(with the error and the tokens it spent) and its traceback logged; nothing of it is applied.
Approving or rejecting a stored plan lives in ``secretary.jobs.approval``; its public names
are importable from here too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, Literal

from loguru import logger
from sqlalchemy import func, select

from secretary.budget import Budget, UsageLedger
from secretary.config import GuardrailSettings, Settings
from secretary.jobs.auditor import Auditor
from secretary.jobs.base import (
    Job,
    JobContext,
    LlmCalls,
    Plan,
    UnknownJob,
    encode_changes,
    referenced_memories,
)
from secretary.jobs.consolidator import Consolidator
from secretary.jobs.extractor import Extractor
from secretary.jobs.guardrails import (
    ProtectionFacts,
    cap_refusal,
    count_changes,
    drop_protected,
    needs_approval,
    protected_ids,
    retired_or_rewritten,
)
from secretary.jobs.linker import Linker
from secretary.jobs.retention import Retention
from secretary.jobs.soul_mapper import SoulMapper
from store.apply import RecordInfo, apply_operations, record_refusal
from store.models import (
    ConversationLog,
    MaintenanceRecord,
    Memory,
    MemoryStatus,
    RecordStatus,
)
from store.repository import Repository

if TYPE_CHECKING:
    from secretary.jobs.approval import PendingPlan as PendingPlan
    from secretary.jobs.approval import approve_plan as approve_plan
    from secretary.jobs.approval import get_pending as get_pending
    from secretary.jobs.approval import pending_plans as pending_plans
    from secretary.jobs.approval import reject_plan as reject_plan
    from secretary.llm import LlmClient
    from store.service import Store

Status = Literal["applied", "planned", "refused", "failed", "skipped", "nothing"]

# In the order a cycle runs them: new memories first, then links, audit, traits, summaries.
JOBS: Mapping[str, Job] = {
    job.name: job
    for job in (Extractor(), Linker(), Auditor(), SoulMapper(), Consolidator(), Retention())
}


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    job: str
    namespace: str
    status: Status
    record_id: int | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    # The plan as it would be (dry run) or was applied, after the guardrails.
    plan: Plan | None = None


def get_job(name: str) -> Job:
    """Return the registered job. Raise UnknownJob if there is none by that name."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJob(name, JOBS) from None


def run_job(
    store: Store,
    settings: Settings,
    job_name: str,
    namespace: str,
    *,
    now: datetime,
    dry_run: bool = False,
    llm: LlmClient | None = None,
    ledger: UsageLedger | None = None,
) -> RunOutcome:
    """Run one job on one namespace: plan, check, then apply, store for approval, or refuse.

    ``dry_run`` plans and checks but writes nothing, not even a record. Raise UnknownJob for an
    unknown name; any other error is recorded as a failed run and reported in the outcome
    (errors that are not an ``Exception``, such as KeyboardInterrupt, are re-raised).
    """
    job = get_job(job_name)
    repository = store.repository
    pending = pending_record(repository, job.name, namespace)
    if pending is not None:
        return make_outcome(job, namespace, "skipped", f"plan #{pending} awaits approval")
    if llm is None:
        from secretary.llm import LlmClient

        llm = LlmClient(settings.llm)
    if job.needs_llm and not llm.configured:
        return make_outcome(job, namespace, "skipped", "LLM not configured")
    budget = Budget.for_run(
        settings.llm, namespace=namespace, now=now, ledger=ledger or RecordLedger(repository)
    )
    ctx = JobContext(
        store=store,
        settings=settings,
        namespace=namespace,
        now=now,
        llm=LlmCalls(llm, budget=budget, max_calls=settings.jobs.max_llm_calls_per_run),
        state=repository.job_state(job.name, namespace),
    )
    try:
        if job.uses_index and not dry_run and repository.outbox_size():
            # Neighbours are found through the index: bring it up to date with SQL first.
            store.indexer.sync()
        plan = job.plan(ctx)
        return _settle(job, ctx, plan, dry_run=dry_run)
    except BaseException as exc:
        logger.opt(exception=exc).error("job {} on namespace {} failed", job.name, namespace)
        record_id = None if dry_run else _record_failure(job, ctx, exc)
        if not isinstance(exc, Exception):
            raise
        message = f"{type(exc).__name__}: {exc}"
        return make_outcome(
            job, namespace, "failed", message, record_id, {"llm_calls": ctx.llm.calls}
        )


def run_cycle(
    store: Store,
    settings: Settings,
    *,
    now: datetime,
    namespaces: Sequence[str] | None = None,
    jobs: Sequence[str] | None = None,
    dry_run: bool = False,
    llm: LlmClient | None = None,
) -> list[RunOutcome]:
    """Run the jobs (default: all, in order) on the namespaces (default: those with work)."""
    names = list(jobs) if jobs else list(JOBS)
    for name in names:
        get_job(name)  # an unknown name fails before anything runs
    outcomes = []
    for namespace in namespaces or namespaces_with_work(store):
        for name in names:
            outcome = run_job(store, settings, name, namespace, now=now, dry_run=dry_run, llm=llm)
            logger.info("{} on {}: {} {}", name, namespace, outcome.status, outcome.message)
            outcomes.append(outcome)
    return outcomes


def namespaces_with_work(store: Store) -> list[str]:
    """Namespaces that hold memories or conversation logs, sorted.

    Every job is incremental, so running one on a namespace with nothing new is cheap (and
    makes no LLM call).
    """
    with store.repository.reading() as session:
        memories = set(session.scalars(select(Memory.namespace).distinct()))
        logs = set(session.scalars(select(ConversationLog.namespace).distinct()))
    return sorted(memories | logs)


def pending_record(repository: Repository, job: str, namespace: str) -> int | None:
    """Return the id of the job's plan awaiting approval in the namespace, if there is one."""
    query = select(MaintenanceRecord.id).where(
        MaintenanceRecord.job == job,
        MaintenanceRecord.namespace == namespace,
        MaintenanceRecord.status == RecordStatus.PLANNED.value,
    )
    with repository.reading() as session:
        return session.scalars(query.order_by(MaintenanceRecord.id).limit(1)).first()


class RecordLedger:
    """Tokens used per namespace and UTC day: the day's records plus this run's calls so far.

    Make one per run: the run's own tokens reach its record only when the run ends.
    """

    def __init__(self, repository: Repository) -> None:
        self._repository = repository
        self._unrecorded: defaultdict[tuple[str, date], int] = defaultdict(int)

    def used_today(self, namespace: str, day: date) -> int:
        start = datetime.combine(day, time(), tzinfo=UTC)
        query = select(
            func.coalesce(func.sum(MaintenanceRecord.tokens_in + MaintenanceRecord.tokens_out), 0)
        ).where(
            MaintenanceRecord.namespace == namespace,
            MaintenanceRecord.started_at >= start,
            MaintenanceRecord.started_at < start + timedelta(days=1),
        )
        with self._repository.reading() as session:
            recorded = int(session.scalar(query) or 0)
        return recorded + self._unrecorded[(namespace, day)]

    def add(self, namespace: str, day: date, tokens: int) -> None:
        self._unrecorded[(namespace, day)] += tokens


# -- after planning ------------------------------------------------------------------------------


def _settle(job: Job, ctx: JobContext, plan: Plan, *, dry_run: bool) -> RunOutcome:
    """Apply the guardrails to a plan, then refuse, report, store or apply it."""
    repository, guardrails = ctx.repository, ctx.settings.guardrails
    protected = protected_targets(repository, ctx.namespace, plan, guardrails, now=ctx.now)
    filtered = drop_protected([c.operations for c in plan.changes], protected)
    if filtered.dropped:
        logger.warning(
            "{}: dropping {} change(s) that would touch protected memories {}",
            job.name,
            len(filtered.dropped),
            list(filtered.protected_hit),
        )
    kept = plan.keeping(filtered.kept)
    stats: dict[str, Any] = {
        **plan.stats,
        "changes": len(kept.changes),
        "operations": len(kept.operations),
        "llm_calls": ctx.llm.calls,
        "dropped_protected": len(filtered.dropped),
        "protected_ids": list(filtered.protected_hit),
    }
    if plan.stopped:
        stats["stopped"] = plan.stopped
    if plan.skipped:
        stats["skipped"] = plan.skipped
    refusal = cap_refusal(count_changes(kept.operations), _active_count(ctx), guardrails)
    if refusal is not None:
        logger.warning("{} on {}: plan refused: {}", job.name, ctx.namespace, refusal)
        stats["refused"] = refusal
        record_id = None if dry_run else _bare_record(job, ctx, stats, RecordStatus.REFUSED)
        return make_outcome(job, ctx.namespace, "refused", refusal, record_id, stats, kept)
    if dry_run:
        return make_outcome(job, ctx.namespace, "planned", "dry run", None, stats, kept)
    if not kept.changes:
        return _nothing(job, ctx, kept, stats)
    if needs_approval(ctx.settings.jobs.approval, kept.operations):
        stats["plan"] = plan_record_stats(repository, kept, base_state=ctx.state)
        record_id = _bare_record(job, ctx, stats, RecordStatus.PLANNED)
        message = f"{len(kept.changes)} change(s) await `secretary plans approve {record_id}`"
        return make_outcome(job, ctx.namespace, "planned", message, record_id, stats, kept)
    info = RecordInfo(stats=stats, **ctx.llm.record_info())
    applied = job.apply(repository, kept, now=ctx.now, info=info)
    message = f"{len(kept.changes)} change(s) applied"
    if plan.skipped:
        message += f"; {plan.skipped}: its LLM part was skipped"
    if plan.stopped:
        message += f"; stopped early: {plan.stopped}"
    return make_outcome(job, ctx.namespace, "applied", message, applied.record_id, stats, kept)


def _nothing(job: Job, ctx: JobContext, plan: Plan, stats: dict[str, Any]) -> RunOutcome:
    """A plan without changes: save a moved watermark, and record tokens spent or a stop.

    The record and the watermark commit together: a crash between the two would lose the
    run's tokens from the day's budget while its watermark says the work is done.
    """
    moved = _state_moved(ctx.state, plan.job_state)
    # Stopped before its first call (the budget is spent): say so in a record, since the job
    # will keep stopping until the budget allows it to run.
    refused = plan.stopped is not None and not ctx.llm.calls
    # Tokens spent, or protected memories spared, are worth a record even with no changes.
    worth_a_record = refused or bool(ctx.llm.calls) or bool(stats.get("dropped_protected"))
    record_id = None
    if moved or worth_a_record:
        status = RecordStatus.REFUSED if refused else RecordStatus.APPLIED
        applied = apply_operations(
            ctx.repository,
            ctx.namespace,
            job.name,
            (),
            now=ctx.now,
            info=RecordInfo(stats=stats, status=status.value, **ctx.llm.record_info()),
            job_state=plan.job_state if moved else None,
            keep_empty_record=worth_a_record,
        )
        record_id = applied.record_id
    if refused:
        return make_outcome(
            job, ctx.namespace, "refused", plan.stopped or "", record_id, stats, plan
        )
    if plan.skipped:
        return make_outcome(job, ctx.namespace, "skipped", plan.skipped, record_id, stats, plan)
    message = f"stopped early: {plan.stopped}" if plan.stopped else "nothing to do"
    return make_outcome(job, ctx.namespace, "nothing", message, record_id, stats, plan)


def protected_targets(
    repository: Repository,
    namespace: str,
    plan: Plan,
    guardrails: GuardrailSettings,
    *,
    now: datetime,
) -> set[int]:
    """Return the protected memories among those the plan would retire or rewrite."""
    rows = repository.memories(namespace, retired_or_rewritten(plan.operations))
    facts = [
        ProtectionFacts(
            id=m.id, pinned=m.pinned, importance=m.importance, last_accessed=m.last_accessed
        )
        for m in rows
    ]
    return protected_ids(facts, guardrails, now=now)


def _state_moved(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> bool:
    # Watermarks start at 0, so a missing key and 0 mean the same.
    return new is not None and any(value != old.get(key, 0) for key, value in new.items())


def _active_count(ctx: JobContext) -> int:
    query = select(func.count()).where(
        Memory.namespace == ctx.namespace, Memory.status == MemoryStatus.ACTIVE.value
    )
    with ctx.repository.reading() as session:
        return int(session.scalar(query) or 0)


def _bare_record(job: Job, ctx: JobContext, stats: Mapping[str, Any], status: str) -> int:
    info = RecordInfo(stats=stats, status=status, **ctx.llm.record_info())
    return record_refusal(ctx.repository, ctx.namespace, job.name, now=ctx.now, info=info)


def _record_failure(job: Job, ctx: JobContext, exc: BaseException) -> int:
    info = RecordInfo(
        stats={"llm_calls": ctx.llm.calls},
        status=RecordStatus.FAILED.value,
        error=f"{type(exc).__name__}: {exc}",
        **ctx.llm.record_info(),
    )
    return record_refusal(ctx.repository, ctx.namespace, job.name, now=ctx.now, info=info)


def make_outcome(
    job: Job,
    namespace: str,
    status: Status,
    message: str,
    record_id: int | None = None,
    stats: Mapping[str, Any] | None = None,
    plan: Plan | None = None,
) -> RunOutcome:
    return RunOutcome(
        job=job.name,
        namespace=namespace,
        status=status,
        record_id=record_id,
        stats=dict(stats or {}),
        message=message,
        plan=plan,
    )


# -- plans stored for approval (read back and settled in secretary.jobs.approval) -------------


def plan_record_stats(
    repository: Repository, plan: Plan, *, base_state: Mapping[str, Any]
) -> dict[str, Any]:
    """The plan as stored in its record, with the versions of the memories it names."""
    ids = referenced_memories(plan.operations)
    return {
        "changes": encode_changes(plan.changes),
        "job_state": dict(plan.job_state) if plan.job_state is not None else None,
        "base_state": dict(base_state),
        "targets": {str(m.id): m.version for m in repository.memories(plan.namespace, ids)},
    }


_APPROVAL = frozenset(
    {"PendingPlan", "approve_plan", "get_pending", "pending_plans", "reject_plan"}
)


def __getattr__(name: str) -> Any:
    # The approval names, loaded on first use: secretary.jobs.approval imports this module.
    if name in _APPROVAL:
        from secretary.jobs import approval

        return getattr(approval, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
