"""Checking incoming items against the store before writing any: conflicts by id (see
store.conflicts), so that a file ingested in several transactions is refused before the first."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine

from store.conflicts import UPDATE_HINT, resolve_logs, resolve_memories
from store.db import session_factory
from store.schemas import LogIn, MemoryIn


class IdentityReads:
    """Reads that tell which items the store holds already, and with what content."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def memory_conflicts(
        self, namespace: str, items: Sequence[MemoryIn], labels: Sequence[str], *, update: bool
    ) -> list[tuple[str, str]]:
        """Return (label, problem) for each item the writer would refuse as a conflict."""
        with self._session() as session:
            resolution = resolve_memories(session, namespace, items, labels)
        return resolution.conflicts(labels, update=update, hint=UPDATE_HINT)

    def log_conflicts(
        self, namespace: str, items: Sequence[LogIn], labels: Sequence[str], *, update: bool
    ) -> list[tuple[str, str]]:
        with self._session() as session:
            resolution = resolve_logs(session, namespace, items, labels)
        return resolution.conflicts(labels, update=update, hint=UPDATE_HINT)
