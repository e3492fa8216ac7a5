"""The schedule table: each job's schedule as changed with `secretary schedule`.

A row overrides the config file's cron expression for its job (or pauses it) and remembers when
the daemon last fired the job, so that a restart can catch up a missed run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from store.db import session_factory, transaction
from store.models import ScheduleEntry


@dataclass(frozen=True, kw_only=True)
class Override:
    """A job's row in ``schedule_entries``: a cron set with `schedule set` (None: the config's)."""

    cron: str | None = None
    paused: bool = False
    # When the daemon last started the job, when that run finished (a start after the last
    # finish is a firing cut short), and when the running daemon will next fire it.
    last_fired_at: datetime | None = None
    last_finished_at: datetime | None = None
    next_fire_at: datetime | None = None

    @property
    def interrupted(self) -> bool:
        """True when the last firing started and never finished (the daemon died meanwhile)."""
        if self.last_fired_at is None:
            return False
        return self.last_finished_at is None or self.last_finished_at < self.last_fired_at


class ScheduleTable:
    """Reads and writes ``schedule_entries``; callers validate job names and expressions."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def overrides(self) -> dict[str, Override]:
        """Return every job's stored override, by job name."""
        with self._reads() as session:
            rows = session.scalars(select(ScheduleEntry)).all()
            return {
                row.job: Override(
                    cron=row.cron,
                    paused=row.paused,
                    last_fired_at=row.last_fired_at,
                    last_finished_at=row.last_finished_at,
                    next_fire_at=row.next_fire_at,
                )
                for row in rows
            }

    def set_cron(self, job: str, cron: str | None, *, now: datetime) -> None:
        """Store ``cron`` for ``job``; None drops it, so the config file's applies again."""
        self._change(job, now, cron=cron)

    def set_paused(self, job: str, paused: bool, *, now: datetime) -> None:
        self._change(job, now, paused=paused)

    def mark_fired(self, job: str, *, now: datetime) -> None:
        """The daemon started a firing of ``job``."""
        self._change(job, now, last_fired_at=now, touch=False)

    def mark_finished(self, job: str, *, now: datetime, next_fire_at: datetime | None) -> None:
        """The firing of ``job`` ended (every namespace's run finished, whatever the outcome).

        Its next fire time is written in the same transaction, so a reader never sees a
        finished firing beside the fire time it has just used.
        """
        self._change(job, now, last_finished_at=now, next_fire_at=next_fire_at, touch=False)

    def set_next_fire(self, job: str, at: datetime | None, *, now: datetime) -> None:
        """Publish the running daemon's next fire time of ``job`` (None: not scheduled)."""
        self._change(job, now, next_fire_at=at, touch=False)

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
