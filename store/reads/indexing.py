"""What telling the vector index's health needs from SQL: the outbox's backlog, the namespaces'
revisions and active memories, and whether the database answers at all."""

from __future__ import annotations

from sqlalchemy import Engine, func, select, text

from store.db import session_factory
from store.kinds import MemoryStatus
from store.models import IndexOutbox, Memory, NamespaceState

_ACTIVE = MemoryStatus.ACTIVE.value


class IndexingReads:
    """Cheap reads for health reports; none of them is on the search path."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def ping(self) -> None:
        """Return if the database answers; raise the driver's error (SQLAlchemyError) if not."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def backlog(self, *, scan: int) -> tuple[int, dict[str, int]]:
        """Return the outbox's size and, among its oldest ``scan`` entries, how many each
        namespace has (counting every entry by namespace costs ~0.7 s at a million)."""
        oldest = select(IndexOutbox.namespace).order_by(IndexOutbox.id).limit(scan).subquery()
        with self._session() as session:
            total = int(session.scalar(select(func.count()).select_from(IndexOutbox)) or 0)
            if not total:
                return 0, {}
            counts = session.execute(
                select(oldest.c.namespace, func.count()).group_by(oldest.c.namespace)
            )
            return total, {namespace: int(n) for namespace, n in counts}

    def revisions(self) -> dict[str, int]:
        """Return namespace -> revision (it grows with every change to the namespace)."""
        with self._session() as session:
            rows = session.execute(select(NamespaceState.namespace, NamespaceState.revision))
            return {namespace: int(revision) for namespace, revision in rows}

    def active_counts(self) -> dict[str, int]:
        """Return namespace -> how many active memories it holds (what its vectors should be)."""
        query = (
            select(Memory.namespace, func.count())
            .where(Memory.status == _ACTIVE)
            .group_by(Memory.namespace)
        )
        with self._session() as session:
            return {namespace: int(n) for namespace, n in session.execute(query)}
