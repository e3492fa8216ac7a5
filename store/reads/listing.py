"""Listing: a namespace's memories page by page, a memory's relations, the namespaces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, case, func, or_, select

from store.db import session_factory
from store.kinds import MemoryStatus
from store.models import ConversationLog, Memory, MemoryRelation
from store.reads.rows import memory_view
from store.views import MemoryView, NamespaceView, RelationView

# Rows a page reads at most while a filter that SQL does not apply (tags, metadata) keeps few.
SCAN = 5000


@dataclass(frozen=True, kw_only=True)
class Page:
    memories: list[MemoryView]
    # Continue after this id; None: nothing is left. A page that hit the scan bound may hold
    # fewer memories than asked for and still have a next one.
    next_after: int | None


class ListingReads:
    """Listing reads over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def page(
        self,
        namespace: str,
        *,
        after: int,
        limit: int,
        statuses: Sequence[str] = (),
        types: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        keep: Callable[[MemoryView], bool] | None = None,
        scan: int = SCAN,
    ) -> Page:
        """Return up to ``limit`` memories with ids above ``after``, by id, that have one of
        ``statuses`` and ``types`` (empty: any), an event time in [since, until) and that
        ``keep`` keeps; reading at most about ``scan`` rows."""
        query = select(Memory).where(Memory.namespace == namespace)
        if statuses:
            query = query.where(Memory.status.in_(list(statuses)))
        if types:
            query = query.where(Memory.type.in_(list(types)))
        if since is not None:
            query = query.where(Memory.event_time >= since)
        if until is not None:
            query = query.where(Memory.event_time < until)
        batch = limit + 1 if keep is None else max(limit + 1, min(200, scan))
        found: list[MemoryView] = []
        scanned, cursor = 0, after
        with self._session() as session:
            while True:
                rows = session.scalars(
                    query.where(Memory.id > cursor).order_by(Memory.id).limit(batch)
                ).all()
                for row in rows:
                    scanned, cursor = scanned + 1, row.id
                    view = memory_view(row)
                    if keep is not None and not keep(view):
                        continue
                    found.append(view)
                    if len(found) > limit:
                        return Page(memories=found[:limit], next_after=found[limit - 1].id)
                if len(rows) < batch:
                    return Page(memories=found, next_after=None)
                if scanned >= scan:
                    return Page(memories=found, next_after=cursor)

    def relations(self, namespace: str, memory_id: int) -> list[RelationView]:
        """Return the relations of a memory in both directions, by id, with the other end."""
        R = MemoryRelation
        with self._session() as session:
            touching = or_(R.source_id == memory_id, R.target_id == memory_id)
            relations = session.scalars(
                select(R).where(R.namespace == namespace, touching).order_by(R.id)
            ).all()
            ends = {r.target_id if r.source_id == memory_id else r.source_id for r in relations}
            others = {
                row.id: row
                for row in session.scalars(select(Memory).where(Memory.id.in_(sorted(ends))))
                if row.namespace == namespace
            }
            views = []
            for relation in relations:
                out = relation.source_id == memory_id
                other = others.get(relation.target_id if out else relation.source_id)
                if other is None:  # a relation never leaves its namespace; be sure of it
                    continue
                views.append(
                    RelationView(
                        id=relation.id,
                        direction="out" if out else "in",
                        other_id=other.id,
                        other_type=other.type,
                        other_status=other.status,
                        other_content=other.content,
                        type=relation.type,
                        strength=relation.strength,
                        description=relation.description,
                        created_at=relation.created_at,
                    )
                )
            return views

    def namespaces(self, names: Sequence[str] | None = None) -> list[NamespaceView]:
        """Return ``names`` with what each holds, or (None) every namespace that holds memories
        or conversation logs; sorted by name."""
        active = func.sum(case((Memory.status == MemoryStatus.ACTIVE.value, 1), else_=0))
        memories = select(Memory.namespace, active, func.count()).group_by(Memory.namespace)
        logs = select(ConversationLog.namespace, func.count()).group_by(ConversationLog.namespace)
        if names is not None:
            memories = memories.where(Memory.namespace.in_(list(names)))
            logs = logs.where(ConversationLog.namespace.in_(list(names)))
        with self._session() as session:
            counted = {ns: (int(a or 0), int(n)) for ns, a, n in session.execute(memories)}
            lines = {ns: int(n) for ns, n in session.execute(logs)}
        shown = sorted(set(names) if names is not None else counted.keys() | lines.keys())
        return [
            NamespaceView(
                namespace=ns,
                memories=counted.get(ns, (0, 0))[0],
                retired=counted.get(ns, (0, 0))[1] - counted.get(ns, (0, 0))[0],
                logs=lines.get(ns, 0),
            )
            for ns in shown
        ]
