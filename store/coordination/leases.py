"""The store's daemon lease: a row in the database saying which daemon acts on the store.

The lease is taken with one statement: an INSERT of its row that, when the row exists (the
primary key), updates it only if the lease is free (ours or expired): INSERT ... ON CONFLICT DO
UPDATE ... WHERE, atomic on SQLite and PostgreSQL alike, so the lease holds across processes
and hosts, and taking one costs a single short write transaction whether its row was there or
not (run leases are taken and released by every run of every job). The holder renews it
well before it expires; a daemon that died leaves a lease that another takes over once expired.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType

from loguru import logger
from sqlalchemy import Engine, delete, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from store.clock import utc_now
from store.errors import StoreError
from store.models import DaemonLease

DAEMON_LEASE = "daemon"
ATTEMPTS = 3  # the row can vanish between a failed INSERT and the read that explains it


class LeaseHeld(StoreError):
    """Another daemon holds the store's lease."""

    # EX_TEMPFAIL: worth trying later; under systemd, Restart= then makes a standby daemon.
    exit_code = 75

    def __init__(self, holder: str, expires_at: datetime) -> None:
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(
            f"another secretary daemon is already running on this store: {holder} holds its"
            f" lease until {expires_at.isoformat(timespec='seconds')}. Stop that daemon first;"
            " if it died, its lease expires by then and this daemon may start. (Several daemons"
            " may share a store on PostgreSQL with a Chroma server, [index] chroma_url.)"
        )


@dataclass(frozen=True, kw_only=True)
class LeaseInfo:
    holder: str
    acquired_at: datetime
    expires_at: datetime


def holder_id() -> str:
    """Return this process's holder id, ``host:pid:uuid`` (the uuid tells a reused pid apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def holder_gone(holder: str) -> bool:
    """Tell whether a holder id names a process of this host that no longer exists.

    Holders of other hosts, and ids not of the ``host:pid:uuid`` form, are never gone: only
    their lease's expiry frees them.
    """
    host, _, rest = holder.partition(":")
    pid, _, _ = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return False


def daemon_lease_name(engine: Engine, holder: str, *, shared_index: bool) -> str:
    """The name of the daemon lease ``holder`` takes on the store behind ``engine``.

    Several daemons share the work (their runs are claimed in ``store.coordination.firings``)
    on PostgreSQL with a Chroma server (``shared_index``): each holds a row of its own,
    "daemon:HOLDER". Otherwise one daemon acts on a store, the lease is one row, "daemon": a
    SQLite store's single writer would serialise several anyway, and an embedded Chroma is
    one process's.
    """
    if engine.dialect.name == "postgresql" and shared_index:
        return f"{DAEMON_LEASE}:{holder}"
    return DAEMON_LEASE


def live_daemons(engine: Engine, now: datetime) -> list[LeaseInfo]:
    """The daemons acting on the store: their leases, unexpired and not held by a process of
    this host that is gone, oldest first."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(DaemonLease.holder, DaemonLease.acquired_at, DaemonLease.expires_at)
            .where(
                or_(DaemonLease.name == DAEMON_LEASE, DaemonLease.name.like(f"{DAEMON_LEASE}:%")),
                DaemonLease.expires_at > now,
            )
            .order_by(DaemonLease.acquired_at)
        ).all()
    return [
        LeaseInfo(holder=row.holder, acquired_at=row.acquired_at, expires_at=row.expires_at)
        for row in rows
        if not holder_gone(row.holder)
    ]


def last_daemon(engine: Engine) -> LeaseInfo | None:
    """The daemon lease that expires (or expired) last, live or not; None if no daemon has
    held one. On PostgreSQL each daemon's row keeps its name after it stopped or died."""
    with engine.connect() as connection:
        row = connection.execute(
            select(DaemonLease.holder, DaemonLease.acquired_at, DaemonLease.expires_at)
            .where(
                or_(DaemonLease.name == DAEMON_LEASE, DaemonLease.name.like(f"{DAEMON_LEASE}:%"))
            )
            .order_by(DaemonLease.expires_at.desc())
            .limit(1)
        ).first()
    if row is None:
        return None
    return LeaseInfo(holder=row.holder, acquired_at=row.acquired_at, expires_at=row.expires_at)


def current_lease(engine: Engine, name: str = DAEMON_LEASE) -> LeaseInfo | None:
    """Return the lease row, expired or not, or None if no daemon has held it."""
    with engine.connect() as connection:
        row = connection.execute(
            select(DaemonLease.holder, DaemonLease.acquired_at, DaemonLease.expires_at).where(
                DaemonLease.name == name
            )
        ).first()
    if row is None:
        return None
    return LeaseInfo(holder=row.holder, acquired_at=row.acquired_at, expires_at=row.expires_at)


class Lease:
    """A named lease held by ``holder`` for ``ttl`` at a time; a context manager for its life."""

    def __init__(
        self,
        engine: Engine,
        *,
        holder: str,
        ttl: timedelta,
        clock: Callable[[], datetime] = utc_now,
        name: str = DAEMON_LEASE,
    ) -> None:
        if ttl <= timedelta(0):
            raise ValueError("a lease needs a positive ttl")
        self._engine = engine
        # On SQLite, BEGIN IMMEDIATE: the conditional update then cannot race another writer.
        self._writes = engine.execution_options(write=True)
        self.holder = holder
        self.ttl = ttl
        self._clock = clock
        self.name = name
        self.expires_at: datetime | None = None  # while held, as last written

    def acquire(self) -> None:
        """Take the lease if it is free, ours, expired, or held by a process of this host that
        no longer exists (killed or crashed). Raise LeaseHeld if another holds it."""
        for _ in range(ATTEMPTS):
            now = self._clock()
            if self._claim(now):
                self.expires_at = now + self.ttl
                return
            held = current_lease(self._engine, self.name)
            if held is not None and held.expires_at > now:
                if holder_gone(held.holder) and self._take(now, dead=held.holder):
                    self.expires_at = now + self.ttl
                    return
                raise LeaseHeld(held.holder, held.expires_at)
        # The row kept changing under us: someone else is starting at this very moment.
        held = current_lease(self._engine, self.name)
        if held is None:
            raise LeaseHeld("another daemon that is starting", self._clock())
        raise LeaseHeld(held.holder, held.expires_at)

    def renew(self) -> bool:
        """Extend the lease by ``ttl`` from now; return False if it is no longer ours."""
        now = self._clock()
        statement = (
            update(DaemonLease)
            .where(DaemonLease.name == self.name, DaemonLease.holder == self.holder)
            .values(expires_at=now + self.ttl)
        )
        with self._writes.begin() as connection:
            renewed = connection.execute(statement).rowcount == 1
        self.expires_at = now + self.ttl if renewed else None
        return renewed

    def confirm(self) -> bool:
        """Return whether the lease is still ours, renewing it only if a third of its ttl has
        passed since it was last written: until it expires nobody else may take it, so a
        holder that checks before each step of its work need not write each time."""
        expires_at = self.expires_at
        if expires_at is not None and expires_at - self._clock() > self.ttl * 2 / 3:
            return True
        return self.renew()

    def release(self) -> None:
        """Give the lease up (if still ours) so that another daemon may start at once."""
        statement = delete(DaemonLease).where(
            DaemonLease.name == self.name, DaemonLease.holder == self.holder
        )
        with self._writes.begin() as connection:
            connection.execute(statement)
        self.expires_at = None

    def expired(self) -> bool:
        """True once the lease as last written has run out (e.g. renewals kept failing)."""
        return self.expires_at is None or self.expires_at <= self._clock()

    def _claim(self, now: datetime) -> bool:
        """Insert the lease's row, or take it over if it is free; True if it is now ours."""
        dialect = self._engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            return self._take(now) or self._insert(now)
        held = {"holder": self.holder, "acquired_at": now, "expires_at": now + self.ttl}
        upsert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        statement = (
            upsert(DaemonLease)
            .values(name=self.name, **held)
            .on_conflict_do_update(
                index_elements=[DaemonLease.name],
                set_=held,
                where=or_(DaemonLease.holder == self.holder, DaemonLease.expires_at <= now),
            )
            .returning(DaemonLease.holder)  # a row if inserted or taken over, none if refused
        )
        with self._writes.begin() as connection:
            return connection.execute(statement).first() is not None

    def _take(self, now: datetime, *, dead: str | None = None) -> bool:
        free = or_(DaemonLease.holder == self.holder, DaemonLease.expires_at <= now)
        if dead is not None:
            free = or_(free, DaemonLease.holder == dead)
        statement = (
            update(DaemonLease)
            .where(DaemonLease.name == self.name, free)
            .values(holder=self.holder, acquired_at=now, expires_at=now + self.ttl)
        )
        with self._writes.begin() as connection:
            return connection.execute(statement).rowcount == 1

    def _insert(self, now: datetime) -> bool:
        row = {
            "name": self.name,
            "holder": self.holder,
            "acquired_at": now,
            "expires_at": now + self.ttl,
        }
        try:
            with self._writes.begin() as connection:
                connection.execute(insert(DaemonLease).values(**row))
        except IntegrityError:
            return False
        return True

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class LeaseKeeper:
    """Renews the leases given to it every third of their ttl, in one thread, until they are
    taken back: a lease then lapses soon after its process dies (SIGKILL, a lost host), however
    long its holder waits between its own renewals (a slow model call).

    Each lease is renewed when it is due, not when another one comes or goes: 16 runs starting
    and ending at their own times made 50 renewals a namespace when every change woke them all.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[int, tuple[Lease, float]] = {}  # id -> (lease, when it is due)
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def keep(self, lease: Lease) -> None:
        """Renew ``lease`` from a third of its ttl from now (it was just acquired or renewed)."""
        with self._changed:
            self._leases[id(lease)] = (lease, self._clock() + self._period(lease))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="leases", daemon=True)
                self._thread.start()
            self._changed.notify_all()  # the loop's next wake-up may now be sooner

    def drop(self, lease: Lease) -> None:
        with self._changed:
            self._leases.pop(id(lease), None)

    def due(self) -> list[Lease]:
        """The leases whose renewal is due now, each then due again a third of its ttl later
        (also after a failed renewal: the holder's own next renewal says whether it lost it)."""
        now = self._clock()
        with self._changed:
            due = [lease for lease, at in self._leases.values() if at <= now]
            for lease in due:
                self._leases[id(lease)] = (lease, now + self._period(lease))
        return due

    def _loop(self) -> None:
        while True:
            with self._changed:
                first = min((at for _, at in self._leases.values()), default=None)
                if first is None or first > self._clock():
                    self._changed.wait(None if first is None else first - self._clock())
            for lease in self.due():
                try:
                    lease.renew()
                except SQLAlchemyError as exc:
                    logger.warning("cannot renew lease {}: {}", lease.name, exc)

    @staticmethod
    def _period(lease: Lease) -> float:
        return lease.ttl.total_seconds() / 3


KEEPER = LeaseKeeper()  # the process's: run leases are kept alive while their runs run
