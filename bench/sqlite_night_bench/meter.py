"""Every write transaction of this process, timed from outside the product: when it asked for
the database's write lock, when it got it, when it let it go.

Installed on SQLAlchemy's ``Engine`` class (class-level event listeners reach every engine the
process makes, the store's included) before the store is opened; nothing of ``store/`` changes.

SQLite. The store's engine runs ``BEGIN IMMEDIATE`` for a write session (``store.db``: a
``begin`` listener of its own, for connections with the ``write`` execution option), and SQLite
answers it only once the database's one write lock (RESERVED) is free: pysqlite's busy handler
(``timeout=30``) sleeps and retries meanwhile. So

  asked     ``before_cursor_execute`` of the statement ``BEGIN IMMEDIATE``
  acquired  ``after_cursor_execute`` of it (the statement returned: the lock is held)
  released  the dialect's ``do_commit`` / ``do_rollback`` returned (the lock is free again)

wait = acquired - asked, held = released - acquired; held CPU is the holding thread's CPU time
(``time.thread_time``) over the hold, the rest of the hold it spent off the CPU (waiting for the
GIL while other threads ran, or for the disk). ``do_commit`` and ``do_rollback`` of the
engine's dialect object are wrapped (SQLAlchemy has no after-commit connection event); the pool
resets returned connections with ``do_rollback`` too, which closes nothing already closed.

PostgreSQL has no database-wide write lock: a write transaction (``begin`` on a connection
with the ``write`` option) counts from its begin (asked = acquired) to its commit or rollback;
row-lock waits inside it are part of "held" and cannot be told apart from here.

Also counted: INSERT/UPDATE/DELETE statements run outside such a transaction (a plain
``BEGIN`` that writes would take the lock late, or fail with "database is locked"), and
``BEGIN IMMEDIATE`` statements that failed (the busy timeout ran out).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_DML = re.compile(r"^\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)
_BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"


@dataclass(kw_only=True)
class Txn:
    """One write transaction; times are seconds since the meter's origin."""

    asked: float
    acquired: float | None = None
    released: float | None = None
    thread: str = ""
    tables: list[str] = field(default_factory=list)  # tables written, in first-write order
    statements: int = 0  # DML statements inside it
    outcome: str = ""  # commit, rollback, failed (the lock was never acquired)
    backend: str = ""
    held_cpu: float = 0.0  # the holding thread's CPU seconds while it held the lock


def _raw(connection: Any) -> Any:
    """The DBAPI connection behind a SQLAlchemy pool proxy (or the connection itself)."""
    return getattr(connection, "dbapi_connection", None) or connection


class WriteLockMeter:
    """Install once, before any engine is used; read ``transactions`` when the work is done."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.transactions: list[Txn] = []
        self.dml_outside: Counter[str] = Counter()
        self._open: dict[int, Txn] = {}
        self._wrapped: set[int] = set()
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def install(self) -> WriteLockMeter:
        event.listen(Engine, "begin", self._begin)
        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)
        event.listen(Engine, "handle_error", self._error)
        return self

    # -- events -------------------------------------------------------------------------------

    def _begin(self, conn: Any) -> None:
        if conn.dialect.name == "sqlite" or not conn.get_execution_options().get("write"):
            return  # SQLite: timed at its BEGIN IMMEDIATE statement (below)
        self._wrap(conn.dialect)
        at = self.now()
        txn = Txn(asked=at, acquired=at, thread=_thread(), backend=conn.dialect.name)
        txn.held_cpu = -time.thread_time()
        with self._lock:
            self._open[id(_raw(conn.connection))] = txn

    def _before(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if statement.startswith(_BEGIN_IMMEDIATE):
            self._wrap(conn.dialect)
            txn = Txn(asked=self.now(), thread=_thread(), backend=conn.dialect.name)
            with self._lock:
                self._open[id(cursor.connection)] = txn
            return
        written = _DML.match(statement)
        if written is None:
            return
        table = written.group(1).lower()
        with self._lock:
            txn = self._open.get(id(cursor.connection))
            if txn is None or txn.acquired is None:
                self.dml_outside[table] += 1
                return
            txn.statements += 1
            if table not in txn.tables:
                txn.tables.append(table)

    def _after(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if statement.startswith(_BEGIN_IMMEDIATE):
            at, cpu = self.now(), time.thread_time()
            with self._lock:
                txn = self._open.get(id(cursor.connection))
                if txn is not None:
                    txn.acquired, txn.held_cpu = at, -cpu

    def _error(self, context: Any) -> None:
        if not str(context.statement or "").startswith(_BEGIN_IMMEDIATE):
            return
        at = self.now()
        with self._lock:
            txn = self._open.pop(id(context.cursor.connection), None) if context.cursor else None
            if txn is not None:
                txn.released, txn.outcome = at, "failed"
                self.transactions.append(txn)

    def _wrap(self, dialect: Any) -> None:
        """Wrap the dialect's do_commit and do_rollback once: the release is when they return."""
        if id(dialect) in self._wrapped:
            return
        with self._lock:
            if id(dialect) in self._wrapped:
                return
            self._wrapped.add(id(dialect))
            for name in ("do_commit", "do_rollback"):
                setattr(dialect, name, self._ending(getattr(dialect, name), name[3:]))

    def _ending(self, original: Any, outcome: str) -> Any:
        def ended(dbapi_connection: Any) -> None:
            try:
                original(dbapi_connection)
            finally:
                at, cpu = self.now(), time.thread_time()
                with self._lock:
                    txn = self._open.pop(id(_raw(dbapi_connection)), None)
                    if txn is not None and txn.acquired is not None:
                        txn.released, txn.outcome = at, outcome
                        txn.held_cpu += cpu
                        self.transactions.append(txn)

        return ended

    # -- results ------------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        with self._lock:
            return {
                "transactions": [asdict(txn) for txn in self.transactions],
                "still_open": len(self._open),
                "dml_outside": dict(self.dml_outside),
            }


def _thread() -> str:
    return threading.current_thread().name
