"""The store at a glance: `secretary status` and GET /v1/status.

``read_status`` reads what it needs (the daemon's lease, the schedule table, the jobs' state and
health, the day's LLM usage, the backlog past each watermark) and ``compose_status`` puts it
together from those plain values; both front ends print ``status_json`` of the result, and the
metrics read their gauges from it.

The store knows neither the jobs nor the LLM budget. The secretary passes them as a
``StatusConfig``: what each job reads past which watermarks, and the daily token budget. Without
one the budget is unknown and only the jobs that have run are listed, with no backlog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from store.clock import parse_timestamp
from store.coordination.leases import LeaseInfo, current_lease, holder_gone
from store.coordination.schedules import Override
from store.database import Database
from store.reads.records import Usage
from store.views import JobStateView

Firing = Literal["idle", "running", "interrupted"]


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
class DaemonStatus:
    running: bool
    holder: str | None  # the lease's holder (host:pid:id), also when it expired
    since: datetime | None
    expires_at: datetime | None


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
    daemon: DaemonStatus
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
        lease=current_lease(db.engine),
        overrides=db.schedules.overrides(),
        states=states,
        namespaces=shown,
        usage=db.records.usage_on(now.date(), shown),
        backlogs=read_backlogs(db, config, states, shown),
    )


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
    lease: LeaseInfo | None,
    overrides: Mapping[str, Override],
    states: Sequence[JobStateView],
    namespaces: Sequence[str],
    usage: Mapping[str, Usage],
    backlogs: Mapping[tuple[str, str], Mapping[str, int]],
) -> Status:
    """Given what ``read_status`` read, return the status (no I/O)."""
    # A lease of a process of this host that no longer exists is a daemon that died.
    running = lease is not None and lease.expires_at > now and not holder_gone(lease.holder)
    daemon = DaemonStatus(
        running=running,
        holder=lease.holder if lease is not None else None,
        since=lease.acquired_at if lease is not None else None,
        expires_at=lease.expires_at if lease is not None else None,
    )
    schedule_jobs = [*config.jobs, *sorted(set(overrides) - set(config.jobs))]
    schedule = tuple(
        _schedule(job, overrides.get(job, Override()), daemon) for job in schedule_jobs
    )
    by_key = {(state.job, state.namespace): state for state in states}
    limit = config.max_tokens_per_day
    spaces = []
    for namespace in namespaces:
        ran = sorted(job for job, ns in by_key if ns == namespace and job not in config.jobs)
        jobs = tuple(
            _job(job, namespace, by_key.get((job, namespace)), backlogs, config, now=now)
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
        max_tokens_per_day=limit,
        schedule=schedule,
        namespaces=tuple(spaces),
    )


def _schedule(job: str, entry: Override, daemon: DaemonStatus) -> ScheduleStatus:
    firing: Firing = "idle"
    if entry.interrupted:
        # A firing of the daemon holding the lease now is still going; one from before it took
        # the lease (or with no daemon at all) was cut short.
        started, since = entry.last_fired_at, daemon.since
        ours = daemon.running and since is not None and started is not None and started >= since
        firing = "running" if ours else "interrupted"
    return ScheduleStatus(
        job=job,
        paused=entry.paused,
        next_fire_at=entry.next_fire_at if daemon.running else None,
        last_fired_at=entry.last_fired_at,
        last_finished_at=entry.last_finished_at,
        firing=firing,
    )


def _job(
    job: str,
    namespace: str,
    state: JobStateView | None,
    backlogs: Mapping[tuple[str, str], Mapping[str, int]],
    config: StatusConfig,
    *,
    now: datetime,
) -> JobStatus:
    health = state.health if state is not None else {}
    until = _time(health.get("backoff_until"))
    failing = health.get("failing")
    last = health.get("last")
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


# -- JSON ----------------------------------------------------------------------------------------


def status_json(status: Status) -> dict[str, Any]:
    daemon = status.daemon
    return {
        "now": status.now.isoformat(),
        "daemon": {
            "running": daemon.running,
            "holder": daemon.holder,
            "since": _iso(daemon.since),
            "expires_at": _iso(daemon.expires_at),
        },
        "budget": {
            "max_tokens_per_day": status.max_tokens_per_day,
            "known": status.max_tokens_per_day is not None,
            "day": status.now.date().isoformat(),
        },
        "schedule": [
            {
                "job": entry.job,
                "paused": entry.paused,
                "next_fire_at": _iso(entry.next_fire_at),
                "last_fired_at": _iso(entry.last_fired_at),
                "last_finished_at": _iso(entry.last_finished_at),
                "firing": entry.firing,
                "interrupted": entry.firing == "interrupted",
            }
            for entry in status.schedule
        ],
        "namespaces": [
            {
                "namespace": space.namespace,
                "tokens_today": space.tokens_today,
                "cost_today": space.cost_today,
                "budget_reached": space.budget_reached,
                "jobs": [_job_json(job) for job in space.jobs],
            }
            for space in status.namespaces
        ],
    }


def _job_json(job: JobStatus) -> dict[str, Any]:
    return {
        "job": job.job,
        "last": dict(job.last) if job.last is not None else None,
        "failures": job.failures,
        "backoff_until": _iso(job.backoff_until),
        "backing_off": job.backing_off,
        "failing": job.failing,
        "quarantined": job.quarantined,
        "backlog": job.backlog_total,
        "backlog_by_watermark": dict(job.backlog) if job.backlog is not None else None,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
