"""What the console needs from the secretary, which the store cannot import.

Approving a plan re-checks it against the jobs' settings, and a schedule is read in the
config's time zone with the secretary's cron rules: `secretary serve` and `secretary run` hand
the console those as a ``ConsoleOps`` (see ``secretary.console_ops``). Without one the console
shows plans and schedules but cannot approve, reject or reschedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, kw_only=True)
class JobSchedule:
    """One job's schedule as `secretary schedule show` tells it."""

    job: str
    cron: str | None
    source: str  # "config" or "database"
    state: str  # "active", "paused", "off" or "invalid"
    next_times: tuple[datetime, ...]
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class CronPreview:
    """A cron expression as it would be stored, and when it would fire next."""

    cron: str
    next_times: tuple[datetime, ...]


@dataclass(frozen=True, kw_only=True)
class ConsoleOps:
    """The secretary's operations, each one call; each raises a SecretaryError to refuse."""

    # Given a pending plan's record id and now, apply it (or refuse it if stale); a message.
    approve: Callable[[int, datetime], str]
    # Given a pending plan's record id and now, drop it; a message.
    reject: Callable[[int, datetime], str]
    # The record ids of the plans awaiting approval, with those the change cap refused.
    pending: Callable[[], Sequence[int]]
    # Given now and a count, every job's schedule with its next fire times.
    schedule: Callable[[datetime, int], Sequence[JobSchedule]]
    # Given an expression, now and a count, the normalised expression and its next firings.
    preview: Callable[[str, datetime, int], CronPreview]
    # Given a job, an expression and now: validate it and store it (store.coordination.schedules).
    set_cron: Callable[[str, str, datetime], str]
    # Given a job, paused or not, and now: store it (store.coordination.schedules).
    set_paused: Callable[[str, bool, datetime], None]
    timezone: str = "UTC"
