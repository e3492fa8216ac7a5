"""Running a job on a namespace: guardrails, apply (or store for approval), records, health.

``run_job`` is the job boundary, the one broad catch: a run that raises is recorded as failed
(with its error and tokens spent), its traceback logged, nothing of the failing part applied. A run

1. takes the job's lease on the namespace, so that one run at a time does the work, across
   processes and hosts (a second one is skipped and says who runs);
2. skips at once while the job backs off after failed runs, or while a plan the change cap
   refused is still current (nothing changed since and the cap is the same);
3. applies the job's plans part by part (``Job.parts``: what needs no model first, with its
   own record, then the model's part), each after the guardrails: changes naming a memory no
   longer active (another writer retired it meanwhile) or touching a protected one are dropped,
   a plan over the change cap is refused and kept (it can be approved), and in approval mode it
   is stored for `secretary plans approve`;
4. saves the job's health with the run's last record: the outcome, failures in a row and the
   back-off, and the items quarantined after a call failed too often (``secretary.health``).

``secretary.cycle`` runs the jobs over the namespaces, as `secretary dream` does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from loguru import logger

from secretary import health as healths
from secretary.approval import plan_stats
from secretary.config import Settings
from secretary.jobs.base import BatchFailed, Job, Plan
from secretary.jobs.context import JobContext, LlmCalls
from secretary.jobs.guardrails import needs_approval
from secretary.jobs.registry import get_job
from secretary.llm.budget import Budget, TokenLedger
from secretary.llm.client import LlmClient
from secretary.llm.throttle import process_throttle
from secretary.logs import error_line
from secretary.outcomes import (
    RunOutcome,
    Status,
    applied_words,
    cap_of,
    cap_refused,
    current_refusal,
    guarded,
    make_outcome,
    merged_stats,
    nothing_words,
    run_stats,
    run_words,
    spent_words,
    state_moved,
    with_records,
)
from store.changes import plural
from store.coordination.leases import KEEPER, Lease, LeaseHeld, current_lease, holder_id
from store.kinds import Outcome
from store.service import Store
from store.write.record_info import RecordInfo

Monotonic = Callable[[], float]


def run_job(
    store: Store,
    settings: Settings,
    job_name: str,
    namespace: str,
    *,
    now: datetime,
    dry_run: bool = False,
    retry_quarantined: bool = False,
    llm: LlmClient | None = None,
    ledger: TokenLedger | None = None,
    monotonic: Monotonic = time.monotonic,
    manual: bool = False,
) -> RunOutcome:
    """Run one job on one namespace (see the module docstring).

    ``dry_run`` plans and checks but writes nothing, not even a record (nor takes the lease).
    ``manual`` (a run someone asked for: `secretary dream`, POST /v1/dream) runs while the job
    backs off after failed runs, and its message says it overrode the back-off.
    ``retry_quarantined`` sends the quarantined items again instead of what is new. Raise
    UnknownJob for an unknown name; any other error is recorded as a failed run and reported in
    the outcome (errors that are not an ``Exception``, such as KeyboardInterrupt, are re-raised).
    """
    job = get_job(job_name)
    with _run_lock(store, settings, job.name, namespace, dry_run=dry_run) as renew:
        if renew is None:
            return _busy(store, job, namespace)
        run = _Run(
            store=store,
            settings=settings,
            job=job,
            namespace=namespace,
            now=now,
            dry_run=dry_run,
            renew=renew,
            monotonic=monotonic,
            started=monotonic(),
            manual=manual,
        )
        return run.go(retry_quarantined=retry_quarantined, llm=llm, ledger=ledger)


def run_lease(job: str, namespace: str) -> str:
    """The name of the lease a run of ``job`` on ``namespace`` holds."""
    return f"run:{job}:{namespace}"


@contextmanager
def _run_lock(
    store: Store, settings: Settings, job: str, namespace: str, *, dry_run: bool
) -> Iterator[Callable[[], bool] | None]:
    """Hold the job's lease on the namespace for the run; yield its renewal (None: another
    process holds it). A dry run writes nothing and takes no lease."""
    if dry_run:
        yield lambda: True
        return
    ttl = timedelta(seconds=settings.jobs.run_lock_seconds)
    lock = Lease(store.engine, holder=holder_id(), ttl=ttl, name=run_lease(job, namespace))
    try:
        lock.acquire()
    except LeaseHeld as exc:
        logger.info("{} on {}: {}", job, namespace, exc)
        yield None
        return
    KEEPER.keep(lock)  # renewed while the run waits on the model too, so it lapses soon if killed
    try:
        yield lock.confirm  # a write at most every third of the ttl (the keeper writes too)
    finally:
        KEEPER.drop(lock)
        lock.release()


def _busy(store: Store, job: Job, namespace: str) -> RunOutcome:
    held = current_lease(store.engine, run_lease(job.name, namespace))
    who = f" by {held.holder} since {held.acquired_at.isoformat()}" if held else ""
    message = f"already running on {namespace!r}{who}: this run was skipped"
    return replace(make_outcome(job.name, namespace, "skipped", message), busy=True)


@dataclass(kw_only=True)
class _Run:
    """One run of one job on one namespace."""

    store: Store
    settings: Settings
    job: Job
    namespace: str
    now: datetime
    dry_run: bool
    renew: Callable[[], bool]
    monotonic: Monotonic
    started: float
    manual: bool = False
    health: dict[str, Any] = field(default_factory=dict)
    records: list[int] = field(default_factory=list)
    overrode: str | None = None  # a manual run's words for the back-off it overrode

    def go(
        self, *, retry_quarantined: bool, llm: LlmClient | None, ledger: TokenLedger | None
    ) -> RunOutcome:
        db, name, namespace = self.store.db, self.job.name, self.namespace
        self.health = db.work.job_health(name, namespace)
        pending = db.records.pending(name, namespace)
        if pending is not None:
            return self._end("skipped", f"plan #{pending} awaits approval")
        waiting = healths.backoff_until(self.health)
        if waiting is not None and waiting > self.now and not self.dry_run:
            failures = plural(self.health.get("failures", 0), "failed run")
            said = f"after {failures} until {waiting.isoformat()}"
            if not self.manual:  # the words dream_exit_code reads (exit code 75)
                return make_outcome(name, namespace, "skipped", f"backing off {said}")
            self.overrode = f"ran now, overriding the back-off {said}"
        refused = current_refusal(db, name, namespace, self.settings.guardrails)
        if refused is not None:
            return make_outcome(name, namespace, "skipped", refused)
        client = llm if llm is not None else LlmClient(self.settings.llm)
        # Every process of the store shares one rate limit and a provider's Retry-After.
        client = client.with_throttle(process_throttle(self.store.engine, self.settings.llm))
        if self.job.needs_llm and not client.configured:
            return self._end("skipped", "LLM not configured")
        budget = Budget.for_run(
            self.settings.llm,
            namespace=namespace,
            now=self.now,
            ledger=ledger or TokenLedger(db.records.tokens_on),
        )
        ctx = JobContext(
            store=self.store,
            namespace=namespace,
            now=self.now,
            llm=LlmCalls(
                client,
                budget=budget,
                max_calls=self.settings.jobs.max_llm_calls_per_run,
                before_call=self._renew,
            ),
            state=db.work.job_state(name, namespace),
            jobs=self.settings.jobs,
            guardrails=self.settings.guardrails,
            health=self.health,
            retry_quarantined=retry_quarantined,
        )
        try:
            if self.job.uses_index and not self.dry_run:
                # Neighbours are found through the index: bring the namespace's vectors up to
                # date with SQL first (if any wait), unless another run or the API's worker is
                # writing the index now; new memories are compared with each other anyway.
                self.store.indexer.sync(wait=0, namespace=namespace)
            return self._parts(ctx)
        except BaseException as exc:
            logger.opt(exception=exc).error("job {} on namespace {} failed", name, namespace)
            outcome = self._failed(ctx, exc)
            if not isinstance(exc, Exception):
                raise
            return outcome

    # -- the parts ------------------------------------------------------------------------------

    def _parts(self, ctx: JobContext) -> RunOutcome:
        outcomes: list[RunOutcome] = []
        for plan in self.job.parts(ctx):
            self._renew()
            outcome = self._settle(ctx, plan)
            outcomes.append(outcome)
            if outcome.status in ("refused", "planned") and not self.dry_run:
                # What follows builds on this part: it waits until this one is settled. Known
                # to follow: the model's part, or the next records of a part split in several.
                if plan.part == "deterministic" or (plan.changes and plan.job_state is None):
                    waits = "what follows waits until this is settled"
                    outcomes[-1] = replace(outcome, message=f"{outcome.message}; {waits}")
                break
        return self._combine(ctx, outcomes)

    def _settle(self, ctx: JobContext, plan: Plan) -> RunOutcome:
        """Apply the guardrails to one plan, then refuse, report, store or apply it."""
        db, name, namespace, guardrails = ctx.db, self.job.name, self.namespace, ctx.guardrails
        plan, filtered = guarded(self.store, namespace, plan, guardrails, now=self.now)
        if filtered.dropped:
            logger.warning(
                "{}: dropping {} change(s) that would touch protected memories {}",
                name,
                len(filtered.dropped),
                list(filtered.protected_hit),
            )
        kept = plan.keeping(filtered.kept)
        stats = run_stats(
            plan,
            kept,
            ctx.llm,
            dropped=[plan.changes[i].label for i in filtered.dropped],
            protected_hit=filtered.protected_hit,
        )
        refusal = cap_refused(db, namespace, kept, guardrails)
        if refusal is not None:
            logger.warning("{} on {}: plan refused: {}", name, namespace, refusal)
            stats |= {
                "refused": refusal,
                "refused_by": "cap",
                "cap": cap_of(guardrails),
                "revision": db.search.revision(namespace),
            }
            if not self.dry_run:
                stats["plan"] = plan_stats(db, kept, base_state=db.work.job_state(name, namespace))
            record_id = self._record(ctx, Outcome.REFUSED, stats)
            message = f"{refusal}; kept as plan #{record_id}: `secretary plans approve {record_id}`"
            if (stale := self._overtaken(ctx, record_id)) is not None:
                message = f"{refusal}; {stale}: record #{record_id} keeps no plan to approve"
            return make_outcome(name, namespace, "refused", message, record_id, stats, kept)
        if self.dry_run:  # with nothing to change, said as the run itself would say it
            said: Status = "planned" if kept.changes else "skipped" if plan.skipped else "nothing"
            words = "dry run" if kept.changes else plan.skipped or nothing_words(stats)
            return make_outcome(name, namespace, said, words, None, stats, kept)
        if not kept.changes:
            return self._nothing(ctx, kept, stats)
        if needs_approval(ctx.jobs.approval, kept.operations):
            base = db.work.job_state(name, namespace)
            stats["plan"] = plan_stats(db, kept, base_state=base)
            record_id = self._record(ctx, Outcome.PLANNED, stats)
            if (stale := self._overtaken(ctx, record_id)) is not None:
                message = f"{stale}: refused, record #{record_id} keeps no plan to approve"
                return make_outcome(name, namespace, "refused", message, record_id, stats, kept)
            waits = "awaits" if len(kept.changes) == 1 else "await"
            message = f"{plural(len(kept.changes), 'change')} {waits} approval:"
            message += f" `secretary plans approve {record_id}`"
            return make_outcome(name, namespace, "planned", message, record_id, stats, kept)
        info = RecordInfo(stats=stats, finished_at=self._end_time(), **ctx.llm.record_info())
        applied = db.writer.apply(
            kept.namespace, name, kept.operations, now=self.now, info=info, job_state=kept.job_state
        )
        if applied.record_id is not None:
            self.records.append(applied.record_id)
        message = applied_words(kept, applied.operations, stats, ctx.llm.record_info())
        status: Status = "applied" if applied.operations else "nothing"
        return make_outcome(name, namespace, status, message, applied.record_id, stats, kept)

    def _nothing(self, ctx: JobContext, plan: Plan, stats: dict[str, Any]) -> RunOutcome:
        """A plan without changes: save a moved watermark, and record tokens spent or a stop.

        The record and the watermark commit together: a crash between the two would lose the
        run's tokens from the day's budget while its watermark says the work is done."""
        moved = state_moved(ctx.state, plan.job_state)
        # Stopped before its first call (the budget is spent): say so in a record, since the
        # job will keep stopping until the budget allows it to run.
        refused = plan.stopped is not None and not ctx.llm.calls
        # Tokens spent, items dropped or protected memories spared are worth a record.
        worth_a_record = (
            refused
            or bool(ctx.llm.calls)
            or bool(stats.get("dropped_protected"))
            or bool(stats.get("dropped"))
        )
        record_id = None
        if moved or worth_a_record:
            if refused:
                outcome = Outcome.REFUSED
            else:
                outcome = Outcome.NOTHING if worth_a_record else Outcome.APPLIED
            applied = ctx.db.writer.apply(
                ctx.namespace,
                self.job.name,
                (),
                now=self.now,
                info=RecordInfo(
                    outcome=outcome,
                    stats=stats,
                    finished_at=self._end_time(),
                    **ctx.llm.record_info(),
                ),
                job_state=plan.job_state if moved else None,
            )
            record_id = applied.record_id
            if record_id is not None:
                self.records.append(record_id)
        status: Status = "refused" if refused else "skipped" if plan.skipped else "nothing"
        if refused:
            message = plan.stopped or ""
        elif plan.skipped:
            message = plan.skipped
        else:
            stop = f"; stopped early: {plan.stopped}" if plan.stopped else ""
            stop += f"; {plan.left}" if plan.left else ""
            message = nothing_words(stats) + stop + spent_words(stats, ctx.llm.record_info())
        return make_outcome(self.job.name, ctx.namespace, status, message, record_id, stats, plan)

    def _combine(self, ctx: JobContext, outcomes: Sequence[RunOutcome]) -> RunOutcome:
        """One outcome for the run: the last part's, with every record and the parts' words."""
        last = outcomes[-1]
        applied = [o for o in outcomes if o.status == "applied"]
        status = last.status
        if status in ("nothing", "skipped") and applied:
            status = "applied"
        several = sum(o.record_id is not None for o in outcomes) > 1
        message = run_words(outcomes, with_record=several)
        if self.overrode:
            message = f"{self.overrode}: {message}"
        retried = last.plan.answered if ctx.retry_quarantined and last.plan is not None else ()
        stats = merged_stats([o.stats for o in outcomes])
        # The record to name first: the last that changed something, else the last written.
        changed = [o.record_id for o in outcomes if o.status == "applied" and o.record_id]
        record_id = (
            changed[-1]
            if changed
            else next((o.record_id for o in reversed(outcomes) if o.record_id), None)
        )
        outcome = make_outcome(
            self.job.name, self.namespace, status, message, record_id, stats, last.plan
        )
        if self.dry_run and ctx.llm.calls:
            outcome = self._dry_run_tokens(ctx, outcome)
        outcome = with_records(outcome, self.records)
        if not self.dry_run:
            self._save_health(
                healths.after_run(
                    self.health,
                    status=outcome.status,
                    at=self.now,
                    record=outcome.record_id,
                    message=message,
                    retried=retried,
                )
            )
        return outcome

    def _dry_run_tokens(self, ctx: JobContext, outcome: RunOutcome) -> RunOutcome:
        """A dry run changes nothing, but its tokens count: a record says so, for the budget."""
        info = RecordInfo(
            outcome=Outcome.NOTHING,
            stats={"dry_run": True, "llm_calls": ctx.llm.calls},
            finished_at=self._end_time(),
            **ctx.llm.record_info(),
        )
        applied = ctx.db.writer.apply(ctx.namespace, self.job.name, (), now=self.now, info=info)
        if applied.record_id is not None:
            self.records.append(applied.record_id)
        spent = ctx.llm.record_info()
        message = (
            f"{outcome.message}; {plural(ctx.llm.calls, 'LLM call')}, {spent['tokens_in']} +"
            f" {spent['tokens_out']} tokens (record #{applied.record_id})"
        )
        return replace(outcome, message=message, record_id=applied.record_id)

    # -- failures -------------------------------------------------------------------------------

    def _failed(self, ctx: JobContext, exc: BaseException) -> RunOutcome:
        cause: BaseException = exc.cause if isinstance(exc, BatchFailed) else exc
        interrupted = not isinstance(cause, Exception)  # Ctrl-C: no failure of the job
        kind = type(cause).__name__  # the record's error has all of it, the message its first line
        error = f"interrupted ({kind})" if interrupted else error_line(cause, full=True)
        said = error if interrupted else error_line(cause)
        message = f"{self.overrode}: {said}" if self.overrode else said
        if self.dry_run:
            return make_outcome(
                self.job.name, self.namespace, "failed", message, None, {"llm_calls": 0}
            )
        batch = exc.ids if isinstance(exc, BatchFailed) else None
        health, quarantined = healths.after_failure(
            self.health,
            at=self.now,
            message=message,
            batch=batch if isinstance(exc, BatchFailed) and exc.cause.items_at_fault else None,
            retry_after=exc.retry_after if isinstance(exc, BatchFailed) else None,
            settings=ctx.jobs,
            interrupted=interrupted,
        )
        stats: dict[str, Any] = {"llm_calls": ctx.llm.calls}
        if batch:
            stats["failed_batch"] = list(batch)
        if quarantined:
            stats["quarantined"] = quarantined
            message += f"; quarantined {plural(len(quarantined), 'item')} after"
            message += f" {ctx.jobs.quarantine_after}"
            message += " failures in a row: `secretary dream --retry-quarantined` sends them again"
        info = RecordInfo(
            outcome=Outcome.FAILED,
            stats=stats,
            error=error,
            finished_at=self._end_time(),
            **ctx.llm.record_info(),
        )
        with ctx.db.writer.unit(ctx.namespace, self.job.name, self.now, info) as unit:
            health["last"]["record"] = unit.record.id
            unit.save_job_health(self.job.name, health)
        record_id = unit.record.id  # a failed run's record is always kept
        self.records.append(record_id)
        outcome = make_outcome(self.job.name, self.namespace, "failed", message, record_id, stats)
        return with_records(outcome, self.records)

    # -- helpers --------------------------------------------------------------------------------

    def _record(self, ctx: JobContext, outcome: Outcome, stats: Mapping[str, Any]) -> int | None:
        """Write a record without operations: a refused run, or a plan stored for approval."""
        if self.dry_run:
            return None
        info = RecordInfo(
            outcome=outcome, stats=stats, finished_at=self._end_time(), **ctx.llm.record_info()
        )
        applied = ctx.db.writer.apply(ctx.namespace, self.job.name, (), now=self.now, info=info)
        if applied.record_id is not None:
            self.records.append(applied.record_id)
        return applied.record_id

    def _overtaken(self, ctx: JobContext, record_id: int | None) -> str | None:
        """What the writer noted of a stored plan that a forget overtook while the job planned
        (``store.write.stale``: the changes naming what was erased are dropped); None if the
        plan stands as stored."""
        if record_id is None:
            return None
        record, _ = ctx.db.records.get(record_id)
        if record.stats.get("refused_by") != "forget":
            return None
        return str(record.stats.get("stale", "a forget erased what it named"))

    def _save_health(self, health: Mapping[str, Any]) -> None:
        self.store.db.writer.save_health(self.namespace, self.job.name, health, now=self.now)

    def _end(self, status: Status, message: str) -> RunOutcome:
        """End a run that did nothing, remembering why."""
        if not self.dry_run:
            self._save_health(
                healths.after_run(
                    self.health, status=status, at=self.now, record=None, message=message
                )
            )
        return make_outcome(self.job.name, self.namespace, status, message)

    def _end_time(self) -> datetime:
        return self.now + timedelta(seconds=max(0.0, self.monotonic() - self.started))

    def _renew(self) -> None:
        if not self.renew():
            raise LeaseHeld("another run of this job (this run's lease expired)", self.now)
