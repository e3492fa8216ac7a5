"""The daemon's schedule: one cron expression per job, overrides kept in the database, and the
APScheduler 3 wrapper that fires the jobs.

Fire times are computed purely (a CronTrigger from data, ``now`` passed in); ``ScheduleBook`` is
the only part that touches the database; ``JobScheduler`` keeps a running BackgroundScheduler in
step with the effective schedule, so `secretary schedule set` takes effect without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from loguru import logger
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from secretary.clock import utc_now
from secretary.config import SCHEDULED_JOBS, ScheduleSettings
from secretary.errors import SecretaryError
from store.db import session_factory, transaction
from store.models import ScheduleEntry

# Cron numbers weekdays from Sunday (0 or 7); APScheduler 3 from Monday (its issue 286). Every
# day-of-week field is translated to names, which mean the same in both.
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
SHORTCUTS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
CRON_HELP = (
    'expected 5 fields "minute hour day-of-month month day-of-week" such as "0 3 * * *", '
    "or @hourly, @daily, @weekly, @monthly"
)


class InvalidSchedule(SecretaryError):
    """A cron expression, job name or time zone that cannot be scheduled."""

    exit_code = 2


class InvalidCron(InvalidSchedule):
    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"invalid cron expression {expression!r}: {reason}")


class UnknownJob(InvalidSchedule):
    def __init__(self, job: str) -> None:
        super().__init__(f"unknown job {job!r}: the scheduled jobs are {', '.join(SCHEDULED_JOBS)}")


# -- cron expressions (pure) -------------------------------------------------------------------


def zone(name: str) -> ZoneInfo:
    """Given an IANA zone name, return the zone. Raise InvalidSchedule if it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {name!r} (expected an IANA name such as 'UTC' or 'Europe/Berlin')"
        ) from None


def check_job(job: str) -> str:
    if job not in SCHEDULED_JOBS:
        raise UnknownJob(job)
    return job


def _weekday(token: str, expression: str) -> int:
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token.lower() in WEEKDAYS:
        return WEEKDAYS.index(token.lower())
    raise InvalidCron(expression, f"{token!r} is not a day of the week (0-7 or sun-sat)")


def _weekday_names(field: str, expression: str) -> str:
    """Given a cron day-of-week field (0 and 7 are Sunday), return it as APScheduler day names."""
    if field == "*":
        return field
    days: set[int] = set()
    for part in field.split(","):
        span, slash, step_text = part.partition("/")
        if slash and not (step_text.isdigit() and int(step_text) > 0):
            raise InvalidCron(expression, f"{part!r} has a bad step")
        if span == "*":
            first, last = 0, 6
        elif "-" in span:
            start, _, end = span.partition("-")
            first, last = _weekday(start, expression), _weekday(end, expression)
            last = 7 if last == 0 and end.lower() == "sun" else last  # "fri-sun"
            if first > last:
                raise InvalidCron(expression, f"the range {span!r} runs backwards")
        elif slash:
            raise InvalidCron(expression, f"{part!r}: a step needs a range or *")
        else:
            first = last = _weekday(span, expression)
        days.update(day % 7 for day in range(first, last + 1, int(step_text or 1)))
    return ",".join(WEEKDAYS[day] for day in sorted(days))


def cron_trigger(expression: str, timezone: ZoneInfo) -> CronTrigger:
    """Given a crontab expression, return its trigger in ``timezone``. Raise InvalidCron if bad.

    Days are read as cron reads them, except that restricting both the day of the month and
    the day of the week is refused: cron fires when either matches, APScheduler when both do.
    """
    text = SHORTCUTS.get(expression.strip().lower(), expression)
    fields = text.split()
    if len(fields) != 5:
        raise InvalidCron(expression, f"it has {len(fields)} field(s): {CRON_HELP}")
    minute, hour, day, month, weekdays = fields
    if not day.startswith("*") and not weekdays.startswith("*"):
        raise InvalidCron(
            expression,
            "it restricts both the day of the month and the day of the week, which cron reads "
            "as either and APScheduler as both; restrict only one",
        )
    try:
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_weekday_names(weekdays, expression),
            timezone=timezone,
        )
    except ValueError as exc:
        raise InvalidCron(expression, str(exc)) from None


def validate_cron(expression: str) -> str:
    """Return the expression with its spacing normalised. Raise InvalidCron if it is bad."""
    normal = " ".join(expression.split())
    cron_trigger(normal, ZoneInfo("UTC"))
    return normal


def next_fire_times(trigger: CronTrigger, now: datetime, count: int) -> list[datetime]:
    """Given a trigger, return its next ``count`` fire times at or after ``now``."""
    times: list[datetime] = []
    previous: datetime | None = None
    moment = now
    while len(times) < count:
        fire: datetime | None = trigger.get_next_fire_time(previous, moment)
        if fire is None:
            break
        times.append(fire)
        previous = moment = fire
    return times


def missed_fire(
    trigger: CronTrigger, *, last_fired: datetime | None, now: datetime, grace: timedelta
) -> datetime | None:
    """Return a fire time in the last ``grace`` before ``now`` that came after ``last_fired``.

    That is a run missed while no daemon was running; None if there is none, or if the job has
    never fired (there is then no sign that a daemon was meant to be running).
    """
    if last_fired is None:
        return None
    start = max(now - grace, last_fired + timedelta(microseconds=1))
    fire: datetime | None = trigger.get_next_fire_time(None, start)
    return fire if fire is not None and fire < now else None


# -- the effective schedule (pure) -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Override:
    """A job's row in ``schedule_entries``: a cron set with `schedule set` (None: the config's)."""

    cron: str | None = None
    paused: bool = False
    last_fired_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class JobSchedule:
    job: str
    cron: str  # "" = not scheduled
    source: Literal["config", "database"]
    paused: bool
    last_fired_at: datetime | None = None

    @property
    def active(self) -> bool:
        return bool(self.cron) and not self.paused


def effective_schedule(
    settings: ScheduleSettings, overrides: Mapping[str, Override]
) -> tuple[JobSchedule, ...]:
    """Given the config and the database's overrides, return what each job runs on."""
    out = []
    for job in SCHEDULED_JOBS:
        override = overrides.get(job, Override())
        out.append(
            JobSchedule(
                job=job,
                cron=override.cron if override.cron is not None else settings.cron(job),
                source="database" if override.cron is not None else "config",
                paused=override.paused,
                last_fired_at=override.last_fired_at,
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


# -- the schedule table ------------------------------------------------------------------------


class ScheduleBook:
    """Reads and writes ``schedule_entries``, the overrides made with `secretary schedule`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def entries(self) -> dict[str, Override]:
        with self._reads() as session:
            rows = session.scalars(select(ScheduleEntry)).all()
            return {
                row.job: Override(cron=row.cron, paused=row.paused, last_fired_at=row.last_fired_at)
                for row in rows
            }

    def set_cron(self, job: str, cron: str, *, now: datetime) -> str:
        """Validate and store ``cron`` for ``job``; return it normalised. Raise InvalidSchedule."""
        check_job(job)
        normal = validate_cron(cron)
        self._change(job, now, cron=normal)
        return normal

    def reset(self, job: str, *, now: datetime) -> None:
        """Drop the stored cron of ``job``: the config file's applies again."""
        self._change(check_job(job), now, cron=None)

    def set_paused(self, job: str, paused: bool, *, now: datetime) -> None:
        self._change(check_job(job), now, paused=paused)

    def mark_fired(self, job: str, *, now: datetime) -> None:
        self._change(job, now, last_fired_at=now, touch=False)

    def _change(self, job: str, now: datetime, *, touch: bool = True, **values: Any) -> None:
        # Two writers may both find no row (PostgreSQL); the loser's insert fails on the primary
        # key and its second attempt updates the winner's row.
        for attempt in (1, 2):
            try:
                with transaction(self._writes) as session:
                    row = session.get(ScheduleEntry, job)
                    if row is None:
                        row = ScheduleEntry(job=job, cron=None, paused=False, updated_at=now)
                        session.add(row)
                    for name, value in values.items():
                        setattr(row, name, value)
                    if touch:
                        row.updated_at = now
                return
            except IntegrityError:
                if attempt == 2:
                    raise


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
        book: ScheduleBook,
        settings: ScheduleSettings,
        fire: Callable[[str], None],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._book = book
        self._settings = settings
        self._fire = fire
        self._clock = clock
        self._applied: dict[str, AppliedKey | None] = {}
        self._scheduler = BackgroundScheduler(
            timezone=zone(settings.timezone),
            executors={"default": ThreadPoolExecutor(settings.workers)},
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
        return when

    def refresh(
        self, settings: ScheduleSettings | None = None, *, catch_up: bool = False
    ) -> list[str]:
        """Apply the current schedule (new ``settings`` after a reload); return what changed.

        Raise SQLAlchemyError if the overrides cannot be read (the caller retries later).
        """
        if settings is not None:
            self._settings = settings
        now = self._clock()
        changes = []
        for entry in effective_schedule(self._settings, self._book.entries()):
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
            return f"{entry.job}: {'paused' if entry.paused else 'not scheduled'}"
        try:
            trigger = cron_trigger(entry.cron, zone(settings.timezone))
        except InvalidSchedule as exc:
            # Only a config or database edited by hand gets here; the job keeps its old timing.
            logger.error("cannot schedule {}: {}", entry.job, exc)
            return ""
        grace = timedelta(seconds=settings.misfire_grace_seconds)
        extra: dict[str, Any] = {}
        if catch_up and missed_fire(trigger, last_fired=entry.last_fired_at, now=now, grace=grace):
            extra["next_run_time"] = now  # absent means "from the trigger"; None would pause it
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
        late = " (missed while stopped: running now)" if extra else ""
        return f"{entry.job}: {entry.cron} [{entry.source}]{late}"

    def _run(self, job: str) -> None:
        try:
            self._book.mark_fired(job, now=self._clock())
        except SQLAlchemyError as exc:
            # Only catch-up after a restart depends on it; the run itself goes ahead.
            logger.warning("could not record that {} fired: {}", job, exc)
        self._fire(job)
