"""Vector index rebuilds that have not finished: one row per namespace in ``index_rebuilds``.

A rebuild is asked for in one transaction (a row per namespace) before Chroma is touched, moves
its row's cursor forward as batches land in the new collection, and deletes the row only once
the new collection has replaced the old one (``store.vector.indexer``). So a rebuild cut short is
resumed by whoever syncs the index next, and until then every reader can tell that the
namespace's vectors are incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, select, update

from store.db import session_factory, transaction
from store.models import IndexRebuild

COPYING, PROMOTING = "copying", "promoting"


@dataclass(frozen=True, kw_only=True)
class RebuildMark:
    """A namespace's unfinished rebuild: memories up to ``after_id`` are in the new collection."""

    namespace: str
    phase: str  # COPYING, then PROMOTING once the new collection holds everything
    after_id: int
    copied: int
    total: int  # active memories when the rebuild was asked for
    requested_at: datetime


def _mark(row: IndexRebuild) -> RebuildMark:
    return RebuildMark(
        namespace=row.namespace,
        phase=row.phase,
        after_id=row.after_id,
        copied=row.copied,
        total=row.total,
        requested_at=row.requested_at,
    )


class RebuildTable:
    """Reads and writes ``index_rebuilds``; only the indexer moves a rebuild forward."""

    def __init__(self, engine: Engine) -> None:
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def pending(self) -> dict[str, RebuildMark]:
        """Return namespace -> its unfinished rebuild (the table is small: one row each)."""
        with self._reads() as session:
            rows = session.scalars(select(IndexRebuild).order_by(IndexRebuild.namespace))
            return {row.namespace: _mark(row) for row in rows}

    def get(self, namespace: str) -> RebuildMark | None:
        with self._reads() as session:
            row = session.get(IndexRebuild, namespace)
            return None if row is None else _mark(row)

    def request(self, totals: Mapping[str, int], *, now: datetime) -> list[str]:
        """Ask for a rebuild of each namespace (namespace -> its active memories), in one
        transaction; a namespace whose rebuild is pending keeps it. Return those added."""
        added = []
        with transaction(self._writes) as session:
            for namespace, total in sorted(totals.items()):
                if session.get(IndexRebuild, namespace) is not None:
                    continue
                session.add(
                    IndexRebuild(
                        namespace=namespace,
                        phase=COPYING,
                        after_id=0,
                        copied=0,
                        total=total,
                        requested_at=now,
                        updated_at=now,
                    )
                )
                added.append(namespace)
        return added

    def advance(self, namespace: str, *, after_id: int, copied: int, now: datetime) -> None:
        """Record that the new collection holds every active memory up to ``after_id``."""
        self._set(namespace, now=now, after_id=after_id, copied=copied)

    def restart(self, namespace: str, *, total: int, now: datetime) -> None:
        """Start copying again from the first memory (the new collection was lost)."""
        self._set(namespace, now=now, phase=COPYING, after_id=0, copied=0, total=total)

    def promoting(self, namespace: str, *, now: datetime) -> None:
        """Record that the new collection is complete and about to replace the old one."""
        self._set(namespace, now=now, phase=PROMOTING)

    def finish(self, namespaces: Sequence[str]) -> None:
        """Forget these rebuilds: their new collections serve now."""
        with transaction(self._writes) as session:
            session.execute(delete(IndexRebuild).where(IndexRebuild.namespace.in_(namespaces)))

    def _set(self, namespace: str, *, now: datetime, **values: object) -> None:
        with transaction(self._writes) as session:
            session.execute(
                update(IndexRebuild)
                .where(IndexRebuild.namespace == namespace)
                .values(updated_at=now, **values)
            )
