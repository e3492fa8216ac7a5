"""Applies the outbox to the vector index: idempotent, resumable, and checkable against SQL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loguru import logger

from store.models import MemoryStatus
from store.repository import Repository
from store.vector_index import IndexItem, VectorIndex

Progress = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class Drift:
    """What differs between SQL (the truth) and the vector index for one namespace."""

    namespace: str
    missing: tuple[int, ...] = ()  # active in SQL, absent from the index
    extra: tuple[int, ...] = ()  # in the index, not active in SQL
    stale: tuple[int, ...] = ()  # indexed at another version than SQL's

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.stale)


@dataclass
class Indexer:
    repository: Repository
    index: VectorIndex
    batch_size: int = 256
    applied: int = field(default=0, init=False)

    def sync(self, *, limit: int | None = None, progress: Progress | None = None) -> int:
        """Apply pending outbox entries in batches; return how many entries were applied.

        Each batch reads the memories' *current* rows, so an entry for a memory that changed
        again is applied at its newest state; an entry is removed only after Chroma has it, so
        a crash anywhere repeats work but never loses it.
        """
        done = 0
        while limit is None or done < limit:
            size = self.batch_size if limit is None else min(self.batch_size, limit - done)
            entries = self.repository.outbox(limit=size)
            if not entries:
                break
            by_namespace: dict[str, list[int]] = {}
            for entry in entries:
                by_namespace.setdefault(entry.namespace, []).append(entry.memory_id)
            for namespace, ids in by_namespace.items():
                self._apply(namespace, ids)
            self.repository.ack_outbox([entry.id for entry in entries])
            done += len(entries)
            if progress is not None:
                progress(len(entries))
        self.applied += done
        return done

    def _apply(self, namespace: str, ids: list[int]) -> None:
        """Make the index hold exactly the current active state of ``ids``."""
        rows = self.repository.memories(namespace, ids)
        active = [row for row in rows if row.status == MemoryStatus.ACTIVE]
        gone = sorted(set(ids) - {row.id for row in active})
        if gone:
            self.index.delete(namespace, gone)
        if active:
            self.index.upsert(
                namespace,
                [
                    IndexItem(memory_id=row.id, version=row.version, text=row.content)
                    for row in active
                ],
            )

    def verify(self, namespace: str) -> Drift:
        """Compare the index with SQL for one namespace."""
        truth = self.repository.index_state(namespace)
        held = self.index.versions(namespace)
        return Drift(
            namespace=namespace,
            missing=tuple(sorted(set(truth) - set(held))),
            extra=tuple(sorted(set(held) - set(truth))),
            stale=tuple(sorted(i for i in set(truth) & set(held) if truth[i] != held[i])),
        )

    def namespaces(self) -> list[str]:
        """Namespaces known to SQL or to the index."""
        return sorted(set(self.repository.namespaces()) | set(self.index.namespaces()))

    def rebuild(self, namespace: str, *, progress: Progress | None = None) -> int:
        """Re-create the namespace's vectors from SQL; return how many memories were indexed."""
        logger.info("rebuilding the vector index of namespace {}", namespace)
        self.index.drop(namespace)
        ids = sorted(self.repository.index_state(namespace))
        for start in range(0, len(ids), self.batch_size):
            batch = ids[start : start + self.batch_size]
            self._apply(namespace, batch)
            if progress is not None:
                progress(len(batch))
        return len(ids)

    def repair(self, drift: Drift) -> None:
        """Fix a drift found by ``verify`` without dropping the whole namespace."""
        self.index.delete(drift.namespace, list(drift.extra))
        todo = list(drift.missing + drift.stale)
        for start in range(0, len(todo), self.batch_size):
            self._apply(drift.namespace, todo[start : start + self.batch_size])
