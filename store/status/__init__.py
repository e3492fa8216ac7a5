"""The store at a glance: `secretary status` and GET /v1/status.

``read_status`` reads what it needs (the daemons' leases, the night's open firings and their
progress, the schedule table, the jobs' state and health, the day's LLM usage, the backlog past
each watermark) and ``compose_status`` puts it together from those plain values; both front ends
print ``status_json`` of the result, and the metrics read their gauges from it.

Several daemons may act on a PostgreSQL store: ``daemons`` lists each live one with what it holds
(its running units' namespaces, by firing; a caller limited to some namespaces sees only those,
the others counted), ``daemon`` is the first, or the last seen when none runs. ``firings`` is the
night in progress: each open firing's units done, running and left, and when it should end.

``store.status.shape`` gives its JSON, ``store.status.job_metrics`` the jobs' part of /metrics
(from the records and the status). The room imports the database, the coordination tables and
the reads below it, never the API or the secretary above it.

The store knows neither the jobs nor the LLM budget. The secretary passes them as a
``StatusConfig``: what each job reads past which watermarks, and the daily token budget. Without
one the budget is unknown and only the jobs that have run are listed, with no backlog.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from store.clock import parse_timestamp
from store.coordination.firings import FiringProgress
from store.coordination.leases import LeaseInfo, last_daemon, live_daemons
from store.coordination.schedules import Override
from store.database import Database
from store.reads.records import Usage
from store.views import JobStateView

Firing = Literal["idle", "running", "interrupted"]
DREAM_KEY = "dream:"  # a dream request's firing: "dream:ID"


@dataclass(frozen=True, kw_only=True)
class JobReads:
    """What a job reads past its watermarks: conversation logs, or active memories (of
    ``types`` only, if given). Its backlog is what lies past each watermark."""

    source: Literal["logs", "memories"]
    watermarks: tuple[str, ...] = ("watermark",)
    types: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class StatusConfig:
    """What the secretary tells the store's status (see the module docstring)."""

    # Tokens per namespace per UTC day: None when not told (unknown), 0 for no budget.
    max_tokens_per_day: int | None = None
    # Every job in running order; None for a job that reads no backlog (retention).
    jobs: Mapping[str, JobReads | None] = field(default_factory=dict)


UNKNOWN = StatusConfig()


@dataclass(frozen=True, kw_only=True)
class Holding:
    """The units one holder runs in one open firing."""

    firing: str  # its key: "linker@2026-11-28T02:00:00+00:00", "dream:42"
    label: str  # "linker@02:00", "dream request #42"
    jobs: tuple[str, ...]
    namespaces: tuple[str, ...]  # those the caller may see, sorted
    hidden: int  # how many more, in namespaces the caller may not see


@dataclass(frozen=True, kw_only=True)
class DaemonStatus:
    running: bool
    holder: str | None  # the lease's holder (host:pid:id), also when it expired
    since: datetime | None
    expires_at: datetime | None
    holds: tuple[Holding, ...] = ()  # what it runs now (a running daemon's only)


@dataclass(frozen=True, kw_only=True)
class FiringStatus:
    """An open firing of the night: its units (one per namespace) done, running and left."""

    key: str
    label: str
    jobs: tuple[str, ...]
    manual: bool  # a dream request's
    opened_at: datetime
    done: int
    running: int
    left: int
    estimated_end: datetime | None  # at the pace of its units so far; None until one is done

    @property
    def total(self) -> int:
        return self.done + self.running + self.left


@dataclass(frozen=True, kw_only=True)
class ScheduleStatus:
    """One job's firings (all namespaces at once): the next, and whether the last finished."""

    job: str
    paused: bool
    next_fire_at: datetime | None  # None with no daemon running
    last_fired_at: datetime | None
    last_finished_at: datetime | None
    # "interrupted": the last firing started and never finished (its daemon died meanwhile).
    firing: Firing


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """One job in one namespace: how its last run went, failures, quarantine and backlog."""

    job: str
    namespace: str
    last: Mapping[str, Any] | None  # status, at, record, message
    failures: int  # failed runs in a row
    backoff_until: datetime | None
    backing_off: bool
    failing: int  # items of the batch that failed last (0: none failing)
    quarantined: int
    # Items past each watermark; None when the job reads none or what it reads is unknown.
    backlog: Mapping[str, int] | None

    @property
    def backlog_total(self) -> int | None:
        """Items past the furthest-behind watermark."""
        return max(self.backlog.values(), default=0) if self.backlog is not None else None


@dataclass(frozen=True, kw_only=True)
class NamespaceStatus:
    namespace: str
    tokens_today: int
    cost_today: float
    budget_reached: bool
    jobs: tuple[JobStatus, ...]


@dataclass(frozen=True, kw_only=True)
class Status:
    now: datetime
    daemon: DaemonStatus  # the first running daemon, or the last one seen
    daemons: tuple[DaemonStatus, ...]  # every running daemon, the longest running first
    firings: tuple[FiringStatus, ...]  # the night in progress, oldest firing first
    max_tokens_per_day: int | None
    schedule: tuple[ScheduleStatus, ...]
    namespaces: tuple[NamespaceStatus, ...]


# -- reading -------------------------------------------------------------------------------------


def read_status(
    db: Database,
    config: StatusConfig = UNKNOWN,
    *,
    now: datetime,
    namespaces: Sequence[str] | None = None,
) -> Status:
    """Read and compose the status; ``namespaces`` limits it (None: every one with work)."""
    states = db.work.job_states()
    known = set(db.work.namespaces_with_work()) | {state.namespace for state in states}
    shown = sorted(known if namespaces is None else known & set(namespaces))
    states = [state for state in states if state.namespace in shown]
    return compose_status(
        now=now,
        config=config,
        daemons=live_daemons(db.engine, now),
        # The single daemon's row of a SQLite store, kept after it stopped or died.
        lease=last_daemon(db.engine),
        firings=[db.firings.progress(firing, now=now) for firing in db.firings.open_firings()],
        scope=None if namespaces is None else set(namespaces),
        overrides=db.schedules.overrides(),
        states=states,
        namespaces=shown,
        usage=db.records.usage_on(now.date(), shown),
        backlogs=read_backlogs(db, config, states, shown),
        settled=_settled(db, states),
    )


def _settled(db: Database, states: Sequence[JobStateView]) -> dict[int, dict[str, Any]]:
    """Return record id -> what became of it since, of the jobs' last runs: undone (by which
    record), or a plan approved (applied as which run) or refused since it was planned."""
    last = [v for state in states if isinstance(v := state.health.get("last"), Mapping)]
    planned = {v.get("record") for v in last if v.get("status") == "planned"}
    ids = {r for v in last if isinstance(r := v.get("record"), int)}
    settled: dict[int, dict[str, Any]] = {}
    for record in db.records.many(sorted(ids)):
        if record.undone_by_id is not None:
            settled[record.id] = {"status": "undone", "undone_by": record.undone_by_id}
        elif record.id in planned and record.status != "planned":
            settled[record.id] = _decided(record.status, record.stats)
    return settled


def _decided(status: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's last run as its approval or refusal left it."""
    applied_as = stats.get("applied_as")
    if isinstance(applied_as, int):
        return {"status": status, "applied_as": applied_as, "message": "plan approved"}
    if stats.get("rejected"):
        return {"status": status, "message": "plan rejected"}
    stale = stats.get("stale")
    return {"status": status, "message": f"stale plan: {stale}" if stale else "plan refused"}


def read_backlogs(
    db: Database, config: StatusConfig, states: Sequence[JobStateView], namespaces: Sequence[str]
) -> dict[tuple[str, str], dict[str, int]]:
    """Return (job, namespace) -> items past each of the job's watermarks."""
    saved = {(state.job, state.namespace): state.state for state in states}
    found: dict[tuple[str, str], dict[str, int]] = {}
    for job, reads in config.jobs.items():
        if reads is None:
            continue
        for key in reads.watermarks:
            marks = {ns: _int(saved.get((job, ns), {}).get(key)) for ns in namespaces}
            if reads.source == "logs":
                counts = db.work.logs_count_after(marks)
            else:
                counts = db.memories.count_after(marks, types=reads.types)
            for namespace, count in counts.items():
                found.setdefault((job, namespace), {})[key] = count
    return found


# -- composing -----------------------------------------------------------------------------------


def compose_status(
    *,
    now: datetime,
    config: StatusConfig,
    daemons: Sequence[LeaseInfo],
    lease: LeaseInfo | None,
    firings: Sequence[FiringProgress],
    overrides: Mapping[str, Override],
    states: Sequence[JobStateView],
    namespaces: Sequence[str],
    usage: Mapping[str, Usage],
    backlogs: Mapping[tuple[str, str], Mapping[str, int]],
    scope: Collection[str] | None = None,
    settled: Mapping[int, Mapping[str, Any]] | None = None,
) -> Status:
    """Given what ``read_status`` read, return the status (no I/O): ``daemons`` the live
    daemons' leases, ``lease`` the last one seen (shown when none is live), ``scope`` the
    namespaces the caller may see of what they run (None: all), ``settled`` what became of
    jobs' last records since (record id -> the fields to tell instead: undone, a plan decided)."""
    holds = _holds(firings, scope, now=now)
    running = tuple(
        DaemonStatus(
            running=True,
            holder=live.holder,
            since=live.acquired_at,
            expires_at=live.expires_at,
            holds=holds.get(live.holder, ()),
        )
        for live in daemons
    )
    daemon = (
        running[0]
        if running
        else DaemonStatus(
            running=False,
            holder=lease.holder if lease is not None else None,
            since=lease.acquired_at if lease is not None else None,
            expires_at=lease.expires_at if lease is not None else None,
        )
    )
    # A scheduled job's open firing runs while some daemon does (each takes over its units).
    open_jobs = {job for p in firings if not p.firing.manual for job in p.firing.jobs}
    schedule_jobs = [*config.jobs, *sorted(set(overrides) - set(config.jobs))]
    schedule = tuple(
        _schedule(job, overrides.get(job, Override()), running, open_jobs) for job in schedule_jobs
    )
    by_key = {(state.job, state.namespace): state for state in states}
    limit = config.max_tokens_per_day
    spaces = []
    for namespace in namespaces:
        ran = sorted(job for job, ns in by_key if ns == namespace and job not in config.jobs)
        jobs = tuple(
            _job(
                job,
                namespace,
                by_key.get((job, namespace)),
                backlogs,
                config,
                settled or {},
                now=now,
            )
            for job in (*config.jobs, *ran)
        )
        spent = usage.get(namespace, Usage(tokens=0, cost=0.0))
        spaces.append(
            NamespaceStatus(
                namespace=namespace,
                tokens_today=spent.tokens,
                cost_today=spent.cost,
                budget_reached=bool(limit) and spent.tokens >= (limit or 0),
                jobs=jobs,
            )
        )
    return Status(
        now=now,
        daemon=daemon,
        daemons=running,
        firings=tuple(_firing(p, now=now) for p in firings),
        max_tokens_per_day=limit,
        schedule=schedule,
        namespaces=tuple(spaces),
    )


def _schedule(
    job: str, entry: Override, daemons: Sequence[DaemonStatus], open_jobs: Collection[str]
) -> ScheduleStatus:
    firing: Firing = "idle"
    if entry.interrupted:
        # A firing started while a daemon running now was there is still going, and so is one
        # whose units are still open while a daemon runs (it takes them over); one from before
        # every running daemon (or with none at all) was cut short.
        started = entry.last_fired_at
        seen = any(
            d.since is not None and started is not None and started >= d.since for d in daemons
        )
        ours = seen or (bool(daemons) and job in open_jobs)
        firing = "running" if ours else "interrupted"
    return ScheduleStatus(
        job=job,
        paused=entry.paused,
        next_fire_at=entry.next_fire_at if daemons else None,
        last_fired_at=entry.last_fired_at,
        last_finished_at=entry.last_finished_at,
        firing=firing,
    )


def _holds(
    firings: Sequence[FiringProgress], scope: Collection[str] | None, *, now: datetime
) -> dict[str, tuple[Holding, ...]]:
    """Return holder -> the units it runs, by firing (oldest first)."""
    found: dict[str, list[Holding]] = {}
    for progress in firings:
        firing = progress.firing
        for holder, names in progress.holders.items():
            shown = sorted(name for name in names if scope is None or name in scope)
            found.setdefault(holder, []).append(
                Holding(
                    firing=firing.key,
                    label=firing_label(firing.key, now),
                    jobs=firing.jobs,
                    namespaces=tuple(shown),
                    hidden=len(names) - len(shown),
                )
            )
    return {holder: tuple(held) for holder, held in found.items()}


def _firing(progress: FiringProgress, *, now: datetime) -> FiringStatus:
    firing = progress.firing
    return FiringStatus(
        key=firing.key,
        label=firing_label(firing.key, now),
        jobs=firing.jobs,
        manual=firing.manual,
        opened_at=firing.opened_at,
        done=progress.done,
        running=progress.running,
        left=progress.left,
        estimated_end=progress.estimated_end(now),
    )


def firing_label(key: str, now: datetime) -> str:
    """A firing's key in short: "linker@02:00" (its date too if not ``now``'s day), "dream
    request #42"; a key of another form as it is."""
    if key.startswith(DREAM_KEY):
        return f"dream request #{key.removeprefix(DREAM_KEY)}"
    job, at, when = key.partition("@")
    if not at:
        return key
    try:
        due = datetime.fromisoformat(when)
    except ValueError:
        return key
    today = now.astimezone(due.tzinfo).date() if due.tzinfo is not None else now.date()
    day = "" if due.date() == today else f"{due:%Y-%m-%d} "
    return f"{job}@{day}{due:%H:%M}"


def _job(
    job: str,
    namespace: str,
    state: JobStateView | None,
    backlogs: Mapping[tuple[str, str], Mapping[str, int]],
    config: StatusConfig,
    settled: Mapping[int, Mapping[str, Any]],
    *,
    now: datetime,
) -> JobStatus:
    health = state.health if state is not None else {}
    until = _time(health.get("backoff_until"))
    failing = health.get("failing")
    last = health.get("last")
    if isinstance(last, Mapping) and last.get("record") in settled:
        # The run applied but was taken back, or its plan was decided: say so, not "applied"
        # or "planned".
        last = {**last, **settled[last["record"]]}
    reads = config.jobs.get(job)
    return JobStatus(
        job=job,
        namespace=namespace,
        last=dict(last) if isinstance(last, Mapping) else None,
        failures=_int(health.get("failures")),
        backoff_until=until,
        backing_off=until is not None and until > now,
        failing=len(failing.get("ids") or ()) if isinstance(failing, Mapping) else 0,
        quarantined=len(health.get("quarantined") or ()),
        backlog=dict(backlogs.get((job, namespace), {})) if reads is not None else None,
    )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        return None
