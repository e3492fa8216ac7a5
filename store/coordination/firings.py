"""Firings: a night's work cut into units that every daemon of the store takes from.

A firing is a scheduled job's firing or a dream request. Its ``key`` ("linker@2026-11-28T02:00:00
+00:00", "dream:42") makes it happen once however many daemons fire it: the first opens it with
one unit per namespace, the others find it open and help. A unit runs the firing's jobs, in order,
on its namespace, under a lease its daemon renews; a unit whose lease lapsed (its daemon was
killed) is taken over by another, and ``claims`` counts the takes.

Claims are serialised (on PostgreSQL by a transaction-scoped advisory lock, on SQLite by the write
lock a write session takes at BEGIN), so the rules a claim checks hold across daemons:

- a namespace runs one unit at a time: none is claimed while another unit on it runs under a live
  lease;
- a namespace's units run in the order of their firings: a unit waits while one of an earlier
  firing on its namespace is not done;
- units are taken by firing, then by ``position`` (the opener's order: longest waiting first).

A claim then marks the unit with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so that a row being
finished or renewed is never waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from loguru import logger
from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    and_,
    case,
    exists,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, aliased

from store.db import session_factory, transaction
from store.models import Firing, FiringUnit

PENDING, RUNNING, DONE = "pending", "running", "done"
# pg_advisory_xact_lock's key for claims: any constant the store uses for nothing else.
CLAIM_LOCK = 0x5EC7_F121
# A firing of this many units or more has its table's statistics brought up to date when it
# opens (PostgreSQL; autovacuum would in a minute or so): planned on the statistics of a table
# a tenth its size, the first claims of a 10,000-unit night checked every unit, 26 ms each.
ANALYZE_UNITS = 1000


@dataclass(frozen=True, kw_only=True)
class FiringView:
    id: int
    key: str
    jobs: tuple[str, ...]
    manual: bool
    retry_quarantined: bool
    opened_by: str
    opened_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class UnitView:
    id: int
    firing: FiringView
    namespace: str
    state: str
    holder: str | None
    lease_until: datetime | None
    claims: int
    started_at: datetime | None
    finished_at: datetime | None
    outcomes: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, kw_only=True)
class FiringProgress:
    """How far an open firing is: units done, running under a live lease, and left."""

    firing: FiringView
    done: int
    running: int
    left: int
    first_started_at: datetime | None
    # Each holder's running units' namespaces.
    holders: Mapping[str, tuple[str, ...]]

    @property
    def total(self) -> int:
        return self.done + self.running + self.left

    def estimated_end(self, now: datetime) -> datetime | None:
        """When the firing ends at the pace of its units so far (None before one is done)."""
        if self.first_started_at is None or not self.done:
            return None
        pace = (now - self.first_started_at) / self.done
        return now + pace * (self.left + self.running)


class Firings:
    """Reads and writes ``firings`` and ``firing_units``; callers run the jobs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    # -- opening ----------------------------------------------------------------------------------

    def open(
        self,
        key: str,
        *,
        jobs: Sequence[str],
        namespaces: Sequence[str],
        opened_by: str,
        now: datetime,
        manual: bool = False,
        retry_quarantined: bool = False,
    ) -> tuple[FiringView, bool]:
        """Open the firing ``key`` with a unit per namespace (in their order); return it and
        whether this call opened it (False: another daemon had, and its units stand)."""
        try:
            with transaction(self._writes) as session:
                firing_id = session.scalar(
                    insert(Firing)
                    .values(
                        key=key,
                        jobs=list(jobs),
                        manual=manual,
                        retry_quarantined=retry_quarantined,
                        opened_by=opened_by,
                        opened_at=now,
                        finished_at=None if namespaces else now,
                    )
                    .returning(Firing.id)
                )
                if namespaces:
                    session.execute(
                        insert(FiringUnit),
                        [
                            {
                                "firing_id": firing_id,
                                "namespace": namespace,
                                "position": position,
                                "state": PENDING,
                                "claims": 0,
                                "outcomes": [],
                            }
                            for position, namespace in enumerate(dict.fromkeys(namespaces))
                        ],
                    )
            opened = True
        except IntegrityError:
            opened = False
        if opened and len(namespaces) >= ANALYZE_UNITS:
            self._analyze()
        found = self.get(key)
        assert found is not None  # inserted, or the other opener's row the key collided with
        return found, opened

    def _analyze(self) -> None:
        if self.engine.dialect.name != "postgresql":
            return  # SQLite plans the claim by its indexes without statistics
        try:
            with self.engine.connect() as connection:
                connection.execute(text("ANALYZE firing_units"))
                connection.commit()
        except DBAPIError as exc:  # e.g. a role that may not analyze: claims are only slower
            logger.warning("could not update the statistics of firing_units: {}", exc)

    # -- reads ------------------------------------------------------------------------------------

    def get(self, key: str) -> FiringView | None:
        with self._reads() as session:
            row = session.scalars(select(Firing).where(Firing.key == key)).first()
            return None if row is None else _firing_view(row)

    def open_firings(self) -> list[FiringView]:
        """Firings with units not done, oldest first."""
        with self._reads() as session:
            rows = session.scalars(
                select(Firing).where(Firing.finished_at.is_(None)).order_by(Firing.id)
            ).all()
            return [_firing_view(row) for row in rows]

    def units(self, firing_id: int) -> list[UnitView]:
        """A firing's units in their order."""
        with self._reads() as session:
            firing = session.get(Firing, firing_id)
            if firing is None:
                return []
            view = _firing_view(firing)
            rows = session.scalars(
                select(FiringUnit)
                .where(FiringUnit.firing_id == firing_id)
                .order_by(FiringUnit.position)
            ).all()
            return [_unit_view(row, view) for row in rows]

    def outcomes(self, firing_id: int) -> list[dict[str, Any]]:
        """The outcomes of the firing's units, in the units' order (what a dream request keeps);
        only that column is read, not the units (1.0 s as rows at 10,000 units)."""
        with self._reads() as session:
            lists = session.scalars(
                select(FiringUnit.outcomes)
                .where(FiringUnit.firing_id == firing_id)
                .order_by(FiringUnit.position)
            ).all()
        return [dict(outcome) for outcomes in lists for outcome in outcomes or ()]

    def progress(self, firing: FiringView, *, now: datetime) -> FiringProgress:
        """Count the firing's units in the database: an opener asks every half second, and a
        night of 10,000 units read row by row took 47 ms a time (``bench/fleet.py
        --coordination``). Only the running units' holders and namespaces are read."""
        of_firing = FiringUnit.firing_id == firing.id
        live = and_(FiringUnit.state == RUNNING, FiringUnit.lease_until > now)

        def count(condition: ColumnElement[bool]) -> Any:
            return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

        with self._reads() as session:
            total, done, running, first = session.execute(
                select(
                    func.count(),
                    count(FiringUnit.state == DONE),
                    count(live),
                    func.min(FiringUnit.started_at),
                ).where(of_firing)
            ).one()
            held = session.execute(
                select(FiringUnit.holder, FiringUnit.namespace)
                .where(of_firing, live)
                .order_by(FiringUnit.position)
            ).all()
        holders: dict[str, list[str]] = {}
        for holder, namespace in held:
            holders.setdefault(holder or "?", []).append(namespace)
        return FiringProgress(
            firing=firing,
            done=int(done),
            running=int(running),
            left=int(total) - int(done) - int(running),
            first_started_at=first,
            holders={holder: tuple(names) for holder, names in holders.items()},
        )

    # -- claiming and finishing -------------------------------------------------------------------

    def claim(
        self, *, holder: str, now: datetime, ttl: timedelta, key_prefix: str | None = None
    ) -> UnitView | None:
        """Take the first unit the rules allow (see the module docstring) for ``ttl``, of a
        firing whose key starts with ``key_prefix`` if given; None if no unit may run now."""
        other = aliased(FiringUnit)
        earlier = and_(other.firing_id < FiringUnit.firing_id, other.state != DONE)
        if key_prefix:
            # Only the firings this claimer takes can hold it back: a scheduled firing a dead
            # daemon left open waits for a daemon, not for `secretary serve`'s dream requests.
            same_kind = select(Firing.id).where(Firing.key.startswith(key_prefix))
            earlier = and_(earlier, other.firing_id.in_(same_kind))
        busy_elsewhere = exists().where(
            other.namespace == FiringUnit.namespace,
            other.id != FiringUnit.id,
            or_(and_(other.state == RUNNING, other.lease_until > now), earlier),
        )

        def first(state: ColumnElement[bool]) -> Select[FiringUnit]:
            return (
                select(FiringUnit)
                .join(Firing, Firing.id == FiringUnit.firing_id)
                .where(
                    Firing.finished_at.is_(None),
                    state,
                    ~busy_elsewhere,
                    *([Firing.key.startswith(key_prefix)] if key_prefix else []),
                )
                .order_by(FiringUnit.firing_id, FiringUnit.position)
                .limit(1)
                .with_for_update(skip_locked=True, of=FiringUnit)
            )

        # A unit whose lease lapsed and a pending one are looked up apart, each walking
        # ix_firing_units_claim in order up to the first the rules allow. Asked in one query
        # (state = pending OR a lapsed lease), PostgreSQL checked and sorted every unit of the
        # night for each claim: 9 ms at 10,000 units against 0.06, and claims run one at a time.
        lapsed = and_(FiringUnit.state == RUNNING, FiringUnit.lease_until <= now)
        with transaction(self._writes) as session:
            _serialise_claims(session)
            found = [
                unit
                for unit in (
                    session.scalars(first(lapsed)).first(),
                    session.scalars(first(FiringUnit.state == PENDING)).first(),
                )
                if unit is not None
            ]
            if not found:
                return None
            unit = min(found, key=lambda unit: (unit.firing_id, unit.position))
            unit.state = RUNNING
            unit.holder = holder
            unit.lease_until = now + ttl
            unit.claims += 1
            unit.started_at = unit.started_at or now
            firing = session.get(Firing, unit.firing_id)
            assert firing is not None  # the unit's foreign key
            return _unit_view(unit, _firing_view(firing))

    def renew(self, unit_ids: Sequence[int], *, holder: str, now: datetime, ttl: timedelta) -> int:
        """Extend the leases of ``holder``'s running units; return how many are still its."""
        if not unit_ids:
            return 0
        statement = (
            update(FiringUnit)
            .where(
                FiringUnit.id.in_(list(unit_ids)),
                FiringUnit.holder == holder,
                FiringUnit.state == RUNNING,
            )
            .values(lease_until=now + ttl)
        )
        with transaction(self._writes) as session:
            return int(session.execute(statement).rowcount)  # type: ignore[attr-defined]

    def progress_of_unit(
        self, unit_id: int, *, holder: str, outcomes: Sequence[Mapping[str, Any]]
    ) -> bool:
        """Store what a running unit's runs said so far; False if ``holder`` lost it."""
        return self._update_held(unit_id, holder, outcomes=[dict(o) for o in outcomes])

    def finish(
        self,
        unit_id: int,
        *,
        holder: str,
        outcomes: Sequence[Mapping[str, Any]],
        now: datetime,
    ) -> bool:
        """Mark ``holder``'s unit done with its outcomes, and its firing once every unit is;
        False if the unit is no longer ``holder``'s (its lease lapsed and another took it)."""
        with transaction(self._writes) as session:
            firing_id = session.scalar(select(FiringUnit.firing_id).where(FiringUnit.id == unit_id))
            # The firing's units finish one at a time (its row locked; SQLite's write lock does
            # that already): two last units finishing at once each saw the other unfinished
            # on PostgreSQL, and the firing stayed open for good.
            session.execute(select(Firing.id).where(Firing.id == firing_id).with_for_update())
            statement = _held(unit_id, holder).values(
                state=DONE, finished_at=now, lease_until=None, outcomes=[dict(o) for o in outcomes]
            )
            if session.execute(statement).rowcount != 1:  # type: ignore[attr-defined]
                return False
            unfinished = exists().where(FiringUnit.firing_id == firing_id, FiringUnit.state != DONE)
            session.execute(
                update(Firing)
                .where(Firing.id == firing_id, Firing.finished_at.is_(None), ~unfinished)
                .values(finished_at=now)
            )
            return True

    def release(self, unit_id: int, *, holder: str) -> bool:
        """Give back a unit ``holder`` claimed but will not run (it is stopping)."""
        return self._update_held(unit_id, holder, state=PENDING, lease_until=None)

    def _update_held(self, unit_id: int, holder: str, **values: Any) -> bool:
        with transaction(self._writes) as session:
            return bool(session.execute(_held(unit_id, holder).values(**values)).rowcount)  # type: ignore[attr-defined]

    def forget_finished(self, *, before: datetime) -> int:
        """Delete firings finished before ``before`` (their units go with them). First close
        the firings whose units are all done that were left open (two last units finishing at
        once did that on PostgreSQL, before ``finish`` locked the firing), as of their last."""
        with transaction(self._writes) as session:
            units = select(FiringUnit.id).where(FiringUnit.firing_id == Firing.id)
            last = select(func.max(FiringUnit.finished_at)).where(FiringUnit.firing_id == Firing.id)
            session.execute(
                update(Firing)
                .where(
                    Firing.finished_at.is_(None),
                    units.exists(),
                    ~units.where(FiringUnit.state != DONE).exists(),
                )
                .values(finished_at=last.scalar_subquery())
            )
            ids = session.scalars(
                select(Firing.id).where(
                    Firing.finished_at.is_not(None), Firing.finished_at < before
                )
            ).all()
            if not ids:
                return 0
            session.execute(
                FiringUnit.__table__.delete().where(FiringUnit.firing_id.in_(ids))  # type: ignore[attr-defined]
            )
            session.execute(Firing.__table__.delete().where(Firing.id.in_(ids)))  # type: ignore[attr-defined]
            return len(ids)


def _held(unit_id: int, holder: str) -> Any:
    return update(FiringUnit).where(
        FiringUnit.id == unit_id, FiringUnit.holder == holder, FiringUnit.state == RUNNING
    )


def _serialise_claims(session: Session) -> None:
    """Make claims one at a time across processes (SQLite's write lock already does)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(CLAIM_LOCK)))


def _firing_view(row: Firing) -> FiringView:
    return FiringView(
        id=row.id,
        key=row.key,
        jobs=tuple(row.jobs),
        manual=row.manual,
        retry_quarantined=row.retry_quarantined,
        opened_by=row.opened_by,
        opened_at=row.opened_at,
        finished_at=row.finished_at,
    )


def _unit_view(row: FiringUnit, firing: FiringView) -> UnitView:
    return UnitView(
        id=row.id,
        firing=firing,
        namespace=row.namespace,
        state=row.state,
        holder=row.holder,
        lease_until=row.lease_until,
        claims=row.claims,
        started_at=row.started_at,
        finished_at=row.finished_at,
        outcomes=tuple(row.outcomes or ()),
    )
