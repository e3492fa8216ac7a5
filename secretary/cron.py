"""Cron expressions, purely: validation, triggers, fire times and missed firings.

Nothing here reads the clock or a database: ``now`` is passed in. APScheduler's CronTrigger does
the calendar arithmetic; day-of-week numbers are translated because cron counts from Sunday and
APScheduler 3 from Monday.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from store.errors import SecretaryError

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


def zone(name: str) -> ZoneInfo:
    """Given an IANA zone name, return the zone. Raise InvalidSchedule if it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {name!r} (expected an IANA name such as 'UTC' or 'Europe/Berlin')"
        ) from None


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
    odd = next((c for c in expression if not c.isascii()), None)
    if odd is not None:  # Python reads full-width digits (U+FF10-FF19) as digits
        raise InvalidCron(
            expression,
            f"{odd!r} (U+{ord(odd):04X}) is not ASCII: cron takes digits 0-9, names, * , - /",
        )
    text = SHORTCUTS.get(expression.strip().lower(), expression)
    fields = text.split()
    if len(fields) != 5:
        raise InvalidCron(expression, f"it has {len(fields)} field(s): {CRON_HELP}")
    minute, hour, day, month, weekdays = fields
    fields_given = {"minute": minute, "hour": hour, "day": day, "month": month}
    for name, value in fields_given.items():
        try:
            CronTrigger(**{name: value}, timezone=timezone)
        except ValueError:
            raise InvalidCron(expression, _field_problem(name, value)) from None
    names = _weekday_names(weekdays, expression)  # a malformed field is named first
    try:
        CronTrigger(day_of_week=names, timezone=timezone)
    except ValueError:
        raise InvalidCron(expression, _field_problem("day_of_week", weekdays)) from None
    if not day.startswith("*") and not weekdays.startswith("*"):
        raise InvalidCron(
            expression,
            "it restricts both the day of the month and the day of the week, which cron would "
            "read as either of them and the secretary cannot; restrict only one (use * for the "
            "other)",
        )
    try:
        return CronTrigger(**fields_given, day_of_week=names, timezone=timezone)
    except ValueError:
        raise InvalidCron(expression, _field_problem("day_of_week", weekdays)) from None


# Each field's name in cron's words and the values it allows (steps, ranges and lists of them).
_FIELDS = {
    "minute": ("minute", "0-59"),
    "hour": ("hour", "0-23"),
    "day": ("day-of-month", "1-31"),
    "month": ("month", "1-12 or jan-dec"),
    "day_of_week": ("day-of-week", "0-7 or sun-sat (0 and 7 are Sunday)"),
}


def _field_problem(name: str, value: str) -> str:
    """Why a field was refused, in cron's terms (the scheduler underneath has its own)."""
    field, allowed = _FIELDS[name]
    return (
        f"the {field} field {value!r} is not valid: it allows {allowed}, as *, a value, a range"
        " a-b, a list a,b, or a step */n or a-b/n with n at least 1"
    )


# A valid expression fires at least once from any moment on within this many years: every
# calendar date, February 29th included, comes round within eight (1896 -> 1904).
_NEVER_YEARS = 8
_REFERENCE = datetime(2001, 1, 1, tzinfo=ZoneInfo("UTC"))


def validate_cron(expression: str) -> str:
    """Return the expression with its spacing normalised.

    Raise InvalidCron if it is malformed or can never fire (such as February 30th).
    """
    normal = " ".join(expression.split())
    trigger = cron_trigger(normal, ZoneInfo("UTC"))
    fire = trigger.get_next_fire_time(None, _REFERENCE)
    if fire is None or fire > _REFERENCE.replace(year=_REFERENCE.year + _NEVER_YEARS):
        raise InvalidCron(expression, "it names a date that never comes (such as February 30th)")
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
