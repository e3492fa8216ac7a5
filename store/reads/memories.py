"""Reading memories: by id, past a watermark, by hash, type, time or status; the export."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Engine, and_, bindparam, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute

from store.db import chunks, session_factory
from store.images import memory_image, relation_image
from store.kinds import TOMBSTONES, MemoryStatus
from store.models import Memory, MemoryRelation
from store.reads.rows import MEMORY_COLUMNS, memory_view
from store.views import MemoryView

_ACTIVE = MemoryStatus.ACTIVE.value
_BY_IDS = select(*MEMORY_COLUMNS).where(Memory.__table__.c.id.in_(bindparam("ids", expanding=True)))
Order = Literal["newest", "recently_changed"]


class MemoryReads:
    """Memories of the store over one engine, as frozen views."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def get(self, namespace: str, memory_id: int) -> MemoryView | None:
        """Return the memory (any status), or None if it is not in the namespace."""
        with self._session() as session:
            row = session.get(Memory, memory_id)
            return memory_view(row) if row is not None and row.namespace == namespace else None

    def namespace_of(self, memory_id: int) -> str | None:
        """Return the namespace holding the memory (any status), or None if there is none."""
        with self.engine.connect() as connection:
            query = select(Memory.namespace).where(Memory.id == memory_id)
            return connection.execute(query).scalar_one_or_none()

    def by_external_id(self, namespace: str, external_id: str) -> MemoryView | None:
        """Return the memory the client knows by ``external_id`` (any status), if any."""
        query = select(Memory).where(
            Memory.namespace == namespace, Memory.external_id == external_id
        )
        views = self._views(query)
        return views[0] if views else None

    def many(self, namespace: str, ids: Iterable[int]) -> list[MemoryView]:
        """Return the memories of the namespace among ``ids``, whatever their status, by id.

        A Core read, not the ORM's: every search reads its hits here, and an ORM session with
        its identity map cost a third of a millisecond more for ten memories."""
        views: list[MemoryView] = []
        with self.engine.connect() as connection:
            for chunk in chunks(ids):
                # By primary key alone (see store.reads.search), the namespace checked here.
                rows = connection.execute(_BY_IDS, {"ids": chunk})
                views.extend(memory_view(row) for row in rows if row.namespace == namespace)
        return views

    def active(self, namespace: str, ids: Iterable[int]) -> dict[int, MemoryView]:
        """Return the active memories of the namespace among ``ids``, by id."""
        return {m.id: m for m in self.many(namespace, ids) if m.status == _ACTIVE}

    def after(
        self,
        namespace: str,
        after_id: int,
        *,
        limit: int,
        types: Sequence[str] | None = None,
    ) -> list[MemoryView]:
        """Return the first ``limit`` active memories with id above ``after_id``, by id."""
        query = (
            select(Memory)
            .where(Memory.namespace == namespace, Memory.status == _ACTIVE, Memory.id > after_id)
            .order_by(Memory.id)
            .limit(limit)
        )
        if types is not None:
            query = query.where(Memory.type.in_(list(types)))
        return self._views(query)

    def with_hashes(
        self, namespace: str, hashes: Iterable[str], *, active_only: bool = True
    ) -> list[MemoryView]:
        """Return the memories whose content hash is one of ``hashes``, by id."""
        wanted = sorted(set(hashes))
        if not wanted:
            return []
        query = select(Memory).where(Memory.namespace == namespace, Memory.content_hash.in_(wanted))
        if active_only:
            query = query.where(Memory.status == _ACTIVE)
        return self._views(query.order_by(Memory.id))

    def of_type(
        self, namespace: str, type_: str, *, order: Order, limit: int | None = None
    ) -> list[MemoryView]:
        """Return active memories of one type: the newest ids first, or the last changed."""
        query = select(Memory).where(
            Memory.namespace == namespace, Memory.status == _ACTIVE, Memory.type == type_
        )
        if order == "newest":
            query = query.order_by(Memory.id.desc())
        else:
            query = query.order_by(Memory.updated_at.desc(), Memory.id.desc())
        return self._views(query if limit is None else query.limit(limit))

    def between(
        self, namespace: str, type_: str, start: datetime, end: datetime, *, limit: int
    ) -> list[MemoryView]:
        """Return the active memories of a type with start <= event_time <= end, in time order."""
        query = (
            select(Memory)
            .where(
                Memory.namespace == namespace,
                Memory.status == _ACTIVE,
                Memory.type == type_,
                Memory.event_time >= start,
                Memory.event_time <= end,
            )
            .order_by(Memory.event_time, Memory.id)
            .limit(limit)
        )
        return self._views(query)

    def tombstones_before(self, namespace: str, cutoff: datetime, *, limit: int) -> list[int]:
        """Return ids of tombstones last changed before ``cutoff``, oldest first."""
        query = (
            select(Memory.id)
            .where(
                Memory.namespace == namespace,
                Memory.status.in_([status.value for status in TOMBSTONES]),
                Memory.updated_at < cutoff,
            )
            .order_by(Memory.updated_at, Memory.id)
            .limit(limit)
        )
        with self._session() as session:
            return list(session.scalars(query))

    def count(self, namespace: str, *, active_only: bool = True) -> int:
        """Return how many memories the namespace holds (by default only active ones)."""
        query = select(func.count()).select_from(Memory).where(Memory.namespace == namespace)
        if active_only:
            query = query.where(Memory.status == _ACTIVE)
        with self._session() as session:
            return int(session.scalar(query) or 0)

    def texts(self, namespace: str, ids: Iterable[int]) -> dict[int, str]:
        """Return id -> content of the namespace's memories among ``ids``, whatever their status."""
        found: dict[int, str] = {}
        with self._session() as session:
            for chunk in chunks(ids):
                query = select(Memory.id, Memory.namespace, Memory.content).where(
                    Memory.id.in_(chunk)
                )
                found.update({i: text for i, ns, text in session.execute(query) if ns == namespace})
        return found

    def count_after(
        self, marks: Mapping[str, int], *, types: Sequence[str] | None = None
    ) -> dict[str, int]:
        """Return, for each namespace in ``marks`` (namespace -> id), how many active memories
        (of ``types``, if given) it holds with an id above its mark; a backlog read."""
        found: dict[str, int] = {}
        with self._session() as session:
            for past in past_marks(Memory.namespace, Memory.id, marks):
                query = select(Memory.namespace, func.count()).where(Memory.status == _ACTIVE, past)
                if types is not None:
                    query = query.where(Memory.type.in_(list(types)))
                found.update(
                    {ns: int(n) for ns, n in session.execute(query.group_by(Memory.namespace))}
                )
        return {namespace: found.get(namespace, 0) for namespace in marks}

    def index_state(self, namespace: str) -> dict[int, int]:
        """Return id -> version of the active memories: what the vector index should hold."""
        query = select(Memory.id, Memory.version).where(
            Memory.namespace == namespace, Memory.status == _ACTIVE
        )
        with self._session() as session:
            return {memory_id: version for memory_id, version in session.execute(query)}

    def namespaces(self) -> list[str]:
        """Return every namespace that holds memories, sorted."""
        with self._session() as session:
            return list(
                session.scalars(select(Memory.namespace).distinct().order_by(Memory.namespace))
            )

    def types(self, namespace: str) -> list[str]:
        """Return the types of the namespace's memories (any status), sorted."""
        query = select(Memory.type).where(Memory.namespace == namespace).distinct()
        with self._session() as session:
            return sorted(session.scalars(query))

    def largest_namespaces(self, limit: int) -> list[str]:
        """Return up to ``limit`` namespaces, those with the most active memories first."""
        count = func.count().label("count")
        query = (
            select(Memory.namespace, count)
            .where(Memory.status == _ACTIVE)
            .group_by(Memory.namespace)
            .order_by(count.desc(), Memory.namespace)
            .limit(limit)
        )
        with self._session() as session:
            return [namespace for namespace, _ in session.execute(query)]

    def export(self, namespace: str) -> Iterator[str]:
        """Yield the namespace as deterministic JSON lines: memories, then relations, by id."""
        with self._session() as session:
            for memory in session.scalars(
                select(Memory).where(Memory.namespace == namespace).order_by(Memory.id)
            ):
                yield export_line({"kind": "memory", **memory_image(memory)})
            for relation in session.scalars(
                select(MemoryRelation)
                .where(MemoryRelation.namespace == namespace)
                .order_by(MemoryRelation.id)
            ):
                yield export_line({"kind": "relation", **relation_image(relation)})

    def _views(self, query: Any) -> list[MemoryView]:
        with self._session() as session:
            return [memory_view(row) for row in session.scalars(query)]


def past_marks(
    namespace: InstrumentedAttribute[str],
    id_: InstrumentedAttribute[int],
    marks: Mapping[str, int],
    *,
    size: int = 100,
) -> Iterator[ColumnElement[bool]]:
    """Yield conditions "id above the namespace's mark", each for at most ``size`` namespaces."""
    names = sorted(marks)
    for start in range(0, len(names), size):
        yield or_(*(and_(namespace == n, id_ > marks[n]) for n in names[start : start + size]))


def export_line(data: Mapping[str, Any]) -> str:
    """One export line: sorted keys, no spaces, UTF-8 as is (so exports compare byte for byte)."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
