"""The daemon's schedule: the effective one (config plus the database's overrides), and the
APScheduler 3 adapter that fires the jobs.

Cron arithmetic is ``secretary.cron``'s (pure); the overrides live in the store's schedule
table (``store.coordination.schedules``); ``JobScheduler`` keeps a running BackgroundScheduler
in step with the effective schedule, so `secretary schedule set` takes effect without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger

from secretary.config import ScheduleSettings
from secretary.cron import (
    InvalidCron,
    InvalidSchedule,
    cron_trigger,
    missed_fire,
    next_fire_times,
    validate_cron,
    zone,
)
from secretary.jobs.registry import JOB_NAMES, get_job
from store.clock import utc_now
from store.coordination.schedules import Override, ScheduleTable
from store.db import DatabaseError

# -- the effective schedule (pure) -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobSchedule:
    job: str
    cron: str  # "" = not scheduled
    source: Literal["config", "database"]
    paused: bool
    last_fired_at: datetime | None = None
    # The last firing started and never finished: the daemon died while it ran.
    interrupted: bool = False
    next_fire_at: datetime | None = None  # as the running daemon published it

    @property
    def active(self) -> bool:
        return bool(self.cron) and not self.paused


def effective_schedule(
    settings: ScheduleSettings, overrides: Mapping[str, Override]
) -> tuple[JobSchedule, ...]:
    """Given the config and the database's overrides, return what each job runs on."""
    out = []
    for job in JOB_NAMES:
        override = overrides.get(job, Override())
        out.append(
            JobSchedule(
                job=job,
                cron=override.cron if override.cron is not None else settings.cron(job),
                source="database" if override.cron is not None else "config",
                paused=override.paused,
                last_fired_at=override.last_fired_at,
                interrupted=override.interrupted,
                next_fire_at=override.next_fire_at,
            )
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class PlannedJob:
    schedule: JobSchedule
    next_times: tuple[datetime, ...]
    problem: str = ""


def plan_schedule(
    settings: ScheduleSettings,
    overrides: Mapping[str, Override],
    *,
    now: datetime,
    count: int,
) -> tuple[PlannedJob, ...]:
    """Given the effective schedule's inputs and ``now``, return each job's next fire times."""
    timezone = zone(settings.timezone)
    out = []
    for entry in effective_schedule(settings, overrides):
        if not entry.active:
            out.append(PlannedJob(schedule=entry, next_times=()))
            continue
        try:
            trigger = cron_trigger(entry.cron, timezone)
        except InvalidCron as exc:
            out.append(PlannedJob(schedule=entry, next_times=(), problem=str(exc)))
            continue
        out.append(
            PlannedJob(schedule=entry, next_times=tuple(next_fire_times(trigger, now, count)))
        )
    return tuple(out)


# -- changing the schedule ------------------------------------------------------------------


class ScheduleBook:
    """`secretary schedule`'s changes: validated, then stored in the store's schedule table."""

    def __init__(self, table: ScheduleTable) -> None:
        self.table = table

    def entries(self) -> dict[str, Override]:
        return self.table.overrides()

    def set_cron(self, job: str, cron: str, *, now: datetime) -> str:
        """Validate and store ``cron`` for ``job``; return it normalised. Raise InvalidSchedule."""
        check_job(job)
        normal = validate_cron(cron)
        self.table.set_cron(job, normal, now=now)
        return normal

    def reset(self, job: str, *, now: datetime) -> None:
        """Drop the stored cron of ``job``: the config file's applies again."""
        self.table.set_cron(check_job(job), None, now=now)

    def set_paused(self, job: str, paused: bool, *, now: datetime) -> None:
        self.table.set_paused(check_job(job), paused, now=now)


def check_job(job: str) -> str:
    """Return ``job`` if the registry knows it. Raise UnknownJob otherwise."""
    return get_job(job).name


# -- the running scheduler ---------------------------------------------------------------------

AppliedKey = tuple[str, str, int, bool]  # cron, time zone, grace, coalesce


class JobScheduler:
    """Keeps an APScheduler BackgroundScheduler in step with the effective schedule.

    ``refresh()`` re-reads the overrides (the daemon calls it every few seconds and on SIGHUP)
    and changes only the jobs whose schedule changed; each firing calls ``fire(job)``.
    """

    def __init__(
        self,
        *,
        table: ScheduleTable,
        settings: ScheduleSettings,
        fire: Callable[[str], None],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._table = table
        self._settings = settings
        self._fire = fire
        self._clock = clock
        self._applied: dict[str, AppliedKey | None] = {}
        self._scheduler = BackgroundScheduler(
            timezone=zone(settings.timezone),
            # A firing waits while the dispatcher runs its units: one thread per job, each job
            # firing once at a time (max_instances=1 below).
            executors={"default": ThreadPoolExecutor(len(JOB_NAMES))},
            # The pool's threads are joined at interpreter exit; daemon=True is for the
            # scheduler's own loop thread only.
            daemon=True,
        )

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    @property
    def settings(self) -> ScheduleSettings:
        return self._settings

    def start(self) -> list[str]:
        """Start firing; a run missed while no daemon ran (within the grace time) starts now."""
        self._scheduler.start()
        return self.refresh(catch_up=True)

    def shutdown(self) -> None:
        """Stop firing; runs in progress go on (the daemon waits for them, bounded)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def next_run_time(self, job: str) -> datetime | None:
        found = self._scheduler.get_job(job)
        if found is None:
            return None
        when: datetime | None = found.next_run_time
        now = self._clock()
        if when is not None and when <= now:
            # A run that ends quickly can ask before APScheduler has moved the job on from the
            # time that fired it; the trigger knows the real next time.
            when = found.trigger.get_next_fire_time(when, now)
        return when

    def refresh(
        self, settings: ScheduleSettings | None = None, *, catch_up: bool = False
    ) -> list[str]:
        """Apply the current schedule (new ``settings`` after a reload); return what changed.

        Raise DatabaseError if the overrides cannot be read (the caller retries later).
        """
        if settings is not None:
            self._settings = settings
        now = self._clock()
        changes = []
        for entry in effective_schedule(self._settings, self._table.overrides()):
            change = self._apply(entry, now=now, catch_up=catch_up)
            if change:
                changes.append(change)
        return changes

    def _apply(self, entry: JobSchedule, *, now: datetime, catch_up: bool) -> str:
        settings = self._settings
        key: AppliedKey | None = None
        if entry.active:
            key = (entry.cron, settings.timezone, settings.misfire_grace_seconds, settings.coalesce)
        if entry.job in self._applied and self._applied[entry.job] == key:
            return ""
        if key is None:
            if self._scheduler.get_job(entry.job) is not None:
                self._scheduler.remove_job(entry.job)
            self._applied[entry.job] = None
            self._publish(entry.job)
            return f"{entry.job}: {'paused' if entry.paused else 'not scheduled'}"
        try:
            trigger = cron_trigger(entry.cron, zone(settings.timezone))
        except InvalidSchedule as exc:
            # Only a config or database edited by hand gets here; the job keeps its old timing.
            logger.error("cannot schedule {}: {}", entry.job, exc)
            return ""
        grace = timedelta(seconds=settings.misfire_grace_seconds)
        extra: dict[str, Any] = {}
        late = ""
        if catch_up and _cut_short(entry, now=now, grace=grace):
            extra["next_run_time"] = now  # absent means "from the trigger"; None would pause it
            late = " (its last firing was cut short: running it again now)"
        elif catch_up and missed_fire(
            trigger, last_fired=entry.last_fired_at, now=now, grace=grace
        ):
            extra["next_run_time"] = now
            late = " (missed while stopped: running now)"
        self._scheduler.add_job(
            self._run,
            trigger=trigger,
            args=(entry.job,),
            id=entry.job,
            name=entry.job,
            replace_existing=True,
            misfire_grace_time=settings.misfire_grace_seconds,
            coalesce=settings.coalesce,
            max_instances=1,  # at most one run of a job at a time, hence per namespace too
            **extra,
        )
        self._applied[entry.job] = key
        self._publish(entry.job)
        return f"{entry.job}: {entry.cron} [{entry.source}]{late}"

    def _run(self, job: str) -> None:
        """A firing: it counts as done only once every namespace's run has finished."""
        try:
            self._table.mark_fired(job, now=self._clock())
        except DatabaseError as exc:
            # Only catch-up after a restart depends on it; the run itself goes ahead.
            logger.warning("could not record that {} fired: {}", job, exc)
        self._fire(job)
        try:
            self._table.mark_finished(job, now=self._clock(), next_fire_at=self.next_run_time(job))
        except DatabaseError as exc:
            logger.warning("could not record that {} finished: {}", job, exc)

    def _publish(self, job: str) -> None:
        """Write the job's next fire time where every process can read it (status, show)."""
        try:
            self._table.set_next_fire(job, self.next_run_time(job), now=self._clock())
        except DatabaseError as exc:
            logger.warning("could not record when {} fires next: {}", job, exc)


def _cut_short(entry: JobSchedule, *, now: datetime, grace: timedelta) -> bool:
    """Tell whether the job's last firing started within the grace time and never finished."""
    started = entry.last_fired_at
    return entry.interrupted and started is not None and now - started <= grace
