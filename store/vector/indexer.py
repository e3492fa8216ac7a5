"""Applies the outbox to the vector index: idempotent, resumable, and checkable against SQL.

A rebuild goes through SQL as well. ``request_rebuild`` writes one row per namespace
(``store.coordination.rebuilds``) in one transaction before Chroma is touched; ``sync``, whoever
calls it next (`secretary index rebuild` itself, `secretary index sync`, the API's index worker
after a restart), fills a new collection of each such namespace a batch at a time and moves the
row's cursor after each batch, while searches keep using the collection in place. Once the new
collection is complete it replaces the old one and the row goes. Outbox entries of a namespace
being rebuilt reach both collections, so neither misses a change made meanwhile; a rebuild cut
short anywhere is resumed where its row says, and until it is done the row tells every reader
that the namespace's vectors are incomplete.

An erasure (a forget) does not wait for the next sync: ``erase`` drops the memories' vectors at
once, reads them back to confirm, and compacts an embedded Chroma (``store.vector.compaction``)
so that no byte of them stays in its files. A sync that drops vectors of memories SQL no longer
has (a forget whose erase could not reach the index) and a finished rebuild compact it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from loguru import logger

from store.clock import utc_now
from store.coordination.leases import Lease, LeaseHeld, holder_id
from store.coordination.rebuilds import COPYING, RebuildMark
from store.database import Database
from store.errors import IndexBusy
from store.kinds import MemoryStatus
from store.vector.compaction import Compacted, CompactionFailed, compact
from store.vector.health import IndexStatus
from store.vector.index import (
    LIVE,
    NEXT,
    ForeignCollection,
    IndexItem,
    VectorIndex,
    VectorIndexError,
)
from store.vector.segments import scrub, segment_dirs

Progress = Callable[[int], None]

SYNC_LEASE = "index-sync"
SYNC_LEASE_SECONDS = 300.0  # renewed after every batch
SYNC_WAIT_SECONDS = 60.0  # how long a second writer waits for the first to finish
# How long an erasure waits for another writer: a person waits on it; past that the outbox
# entries stay, and whoever holds the lease applies them (and compacts) at its next sync.
ERASE_WAIT_SECONDS = 10.0
# Outbox entries of the namespace read to find an erasure's own (to remove them once applied);
# any beyond are applied again, harmlessly, by the next sync.
_ERASURE_SCAN = 10_000


def _take(lease: Lease, wait: float, *, step: float = 0.2) -> bool:
    """Take the lease, waiting (at most ``wait`` seconds) while another process holds it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            lease.acquire()
            return True
        except LeaseHeld:
            if time.monotonic() >= deadline:
                return False
            time.sleep(step)


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


@dataclass(frozen=True, kw_only=True)
class Erased:
    """What ``Indexer.erase`` did: the vectors are gone from the index (read back to confirm)
    unless ``pending`` says why not yet; ``compacted`` is None for a Chroma server."""

    pending: str | None = None  # why the vectors may still be there: the next sync removes them
    compacted: Compacted | None = None
    compaction_failed: str | None = None  # the vectors are gone, but their bytes may remain


@dataclass
class Indexer:
    db: Database
    index: VectorIndex
    batch_size: int = 256
    clock: Callable[[], datetime] = utc_now
    # The health snapshot searches read: told when a rebuild is asked for or done, and given
    # a chance to refresh itself after every batch of a long sync.
    status: IndexStatus | None = None
    applied: int = field(default=0, init=False)
    # Set when vectors of memories SQL no longer holds were deleted, or a collection replaced:
    # the writer holding the lease compacts an embedded Chroma before it lets go.
    _compact_due: bool = field(default=False, init=False)
    # HNSW segment directories this process zeroed the unused slots of (store.vector.segments).
    _scrubbed: set[str] = field(default_factory=set, init=False)

    def sync(
        self,
        *,
        limit: int | None = None,
        progress: Progress | None = None,
        wait: float | None = None,
        namespace: str | None = None,
    ) -> int:
        """Finish the pending rebuilds, then apply pending outbox entries, in batches; return
        how many memories were copied and entries applied. With ``namespace``, apply only that
        namespace's entries and leave the rebuilds: what a job's run needs before it reads its
        namespace's neighbours (a run that drained everyone's entries kept its unit busy for
        ten minutes in a night of three daemons, indexing what the others' runs kept adding).

        Each batch reads the memories' *current* rows, so an entry for a memory that changed
        again is applied at its newest state; an entry is removed only after Chroma has it, so
        a crash anywhere repeats work but never loses it. One process writes the index at a
        time (a lease in the database): an embedded Chroma is not safe to write from two
        processes, and two writers would embed the same memories twice. ``wait`` bounds how
        long to wait for another writer (SYNC_WAIT_SECONDS by default; 0: sync only if nobody
        does now, as a job's run asks: the one syncing applies its entries too).
        """
        if namespace is not None:
            if not self.db.work.outbox_waiting(namespace):
                return 0
        elif not self.db.work.outbox_size() and not self.db.rebuilds.pending():
            return 0
        with self._writing(wait) as lease:
            if lease is None:
                if wait == 0:  # the caller only wanted a sync nobody else was running
                    logger.debug("the vector index is being synced by another run")
                else:
                    logger.warning(
                        "another process keeps writing the vector index: not syncing now"
                    )
                return 0
            done = 0
            for mark in self.db.rebuilds.pending().values() if namespace is None else ():
                if limit is not None and done >= limit:
                    break
                done += sum(self._rebuild(mark, self._left(limit, done), progress, lease))
            if limit is None or done < limit:
                done += self._drain(self._left(limit, done), progress, lease, namespace)
            self._compact_if_due(lease)
            if done:
                self._scrub_new_segments()
        self.applied += done
        return done

    def erase(self, namespace: str, memory_ids: Sequence[int]) -> Erased:
        """Drop the vectors of memories just erased from SQL (a forget) now: from every
        collection of the namespace a change goes to, confirmed by reading them back; remove
        their outbox entries; then compact an embedded Chroma so that their bytes go too.

        Raise VectorIndexError if Chroma fails or still holds one of them: their outbox entries
        stay, and the next sync deletes them (and compacts). If another process keeps writing
        the index for ERASE_WAIT_SECONDS, return ``pending``: that process does it.
        """
        ids = sorted(set(memory_ids))
        with self._writing(wait=ERASE_WAIT_SECONDS) as lease:
            if lease is None:
                return Erased(pending="another process keeps writing the vector index")
            slots = self._slots(namespace, self.db.rebuilds.pending())
            if not slots:  # the collection in place is being replaced by one not made yet
                return Erased(pending="the namespace's vector index is being rebuilt")
            self.index.delete(namespace, ids, slots=slots)
            for slot in slots:
                left = self.index.held(namespace, ids, slot=slot)
                if left:
                    raise VectorIndexError(
                        f"memories {left} of namespace {namespace!r} are still in the vector "
                        "index after their delete"
                    )
            wanted = set(ids)
            entries = self.db.work.outbox(limit=len(ids) + _ERASURE_SCAN, namespace=namespace)
            self.db.writer.ack_outbox([entry.id for entry in entries if entry.memory_id in wanted])
            lease.renew()
            self._compact_due = False  # done now, with what it says
            try:
                compacted = self._compact()
            except CompactionFailed as exc:
                logger.warning("{}", exc)
                return Erased(compaction_failed=str(exc))
        return Erased(compacted=compacted)

    def request_rebuild(self, namespaces: Sequence[str]) -> None:
        """Ask for a rebuild of these namespaces, in one transaction; one already asked for
        is left as it is (it resumes). ``sync`` carries them out."""
        totals = {namespace: self.db.memories.count(namespace) for namespace in namespaces}
        added = self.db.rebuilds.request(totals, now=self.clock())
        if added:
            logger.info("vector index rebuild asked for: {}", ", ".join(added))
        if self.status is not None:
            self.status.refresh()

    def rebuild(self, namespace: str, *, progress: Progress | None = None) -> int:
        """Rebuild the namespace's vectors from SQL, asking for it first if nobody has; return
        how many memories this call copied. Raise IndexBusy if another process writes the
        index for longer than SYNC_WAIT_SECONDS (the rebuild stays asked for)."""
        self.request_rebuild([namespace])
        with self._writing() as lease:
            if lease is None:
                raise IndexBusy([namespace])
            mark = self.db.rebuilds.get(namespace)
            if mark is None:  # finished by another process while this one waited
                return 0
            copied, _ = self._rebuild(mark, None, progress, lease)
            self._compact_if_due(lease)
            return copied

    def pending_rebuilds(self) -> Mapping[str, RebuildMark]:
        """Return namespace -> its unfinished rebuild."""
        return self.db.rebuilds.pending()

    def _rebuild(
        self, mark: RebuildMark, limit: int | None, progress: Progress | None, lease: Lease
    ) -> tuple[int, int]:
        """Carry one namespace's rebuild on from its row: copy, then put the new collection in
        place. Return (memories copied, outbox entries applied meanwhile)."""
        namespace, copied, drained = mark.namespace, 0, 0
        if mark.phase == COPYING:
            after_id, so_far = self._resume(mark)
            while True:
                size = self.batch_size if limit is None else min(self.batch_size, limit - copied)
                if size <= 0:
                    return copied, drained  # the rest at the next sync
                batch = self.db.memories.after(namespace, after_id, limit=size)
                if not batch:
                    break
                items = [IndexItem.of(m) for m in batch]
                self.index.upsert(namespace, items, slots=(NEXT,))
                after_id, so_far = batch[-1].id, so_far + len(batch)
                self.db.rebuilds.advance(
                    namespace, after_id=after_id, copied=so_far, now=self.clock()
                )
                lease.renew()
                copied += len(batch)
                if progress is not None:
                    progress(len(batch))
                self._batch_done()
                # Keep the collection in place current for searches while the new one fills.
                drained += self._drain(self.batch_size, None, lease, None)
            # Everything changed so far reaches the new collection before it takes over.
            drained += self._drain(None, None, lease, None)
            self.db.rebuilds.promoting(namespace, now=self.clock())
        if not self.index.promote(namespace):
            logger.warning(
                "the rebuilt index of namespace {!r} is gone: the next sync copies it again",
                namespace,
            )
            total = self.db.memories.count(namespace)
            self.db.rebuilds.restart(namespace, total=total, now=self.clock())
            return copied, drained
        self.db.rebuilds.finish([namespace])
        self._compact_due = True  # the replaced collection's rows and directory
        logger.info("vector index of namespace {!r} rebuilt", namespace)
        if self.status is not None:
            self.status.refresh()
        return copied, drained

    def _resume(self, mark: RebuildMark) -> tuple[int, int]:
        """Open the collection the rebuild fills; return where copying goes on (after_id,
        copied): from the row, or from the start if that collection was lost."""
        found = self.index.prepare_next(mark.namespace)
        if mark.after_id and not found:
            logger.warning(
                "the half-built index of namespace {!r} is gone: copying it again from the start",
                mark.namespace,
            )
            total = self.db.memories.count(mark.namespace)
            self.db.rebuilds.restart(mark.namespace, total=total, now=self.clock())
            return 0, 0
        if mark.after_id:
            logger.info(
                "resuming the rebuild of namespace {!r} after {} of {} memories",
                mark.namespace,
                mark.copied,
                mark.total,
            )
        return mark.after_id, mark.copied

    def _drain(
        self, limit: int | None, progress: Progress | None, lease: Lease, namespace: str | None
    ) -> int:
        """Apply outbox entries (all, or up to ``limit``; of one namespace, or of every one);
        return how many were applied.

        A namespace whose collection is another store's (``ForeignCollection``) keeps its
        entries and is left out of the rest of the drain, so that the other namespaces are
        indexed; its refusal is raised once they are."""
        done = 0
        refused: dict[str, ForeignCollection] = {}
        while limit is None or done < limit:
            size = self.batch_size if limit is None else min(self.batch_size, limit - done)
            entries = self.db.work.outbox(limit=size, namespace=namespace, excluding=list(refused))
            if not entries:
                break
            rebuilding = self.db.rebuilds.pending()  # asked for by anyone, up to this batch
            by_namespace: dict[str, list[int]] = {}
            for entry in entries:
                by_namespace.setdefault(entry.namespace, []).append(entry.memory_id)
            for name, ids in by_namespace.items():
                try:
                    self._apply(name, ids, self._slots(name, rebuilding))
                except ForeignCollection as exc:
                    refused[name] = exc
            applied = [entry.id for entry in entries if entry.namespace not in refused]
            self.db.writer.ack_outbox(applied)
            lease.renew()
            done += len(applied)
            if progress is not None:
                progress(len(applied))
            self._batch_done()
        if refused:
            raise next(iter(refused.values()))
        return done

    def _slots(self, namespace: str, rebuilding: Mapping[str, RebuildMark]) -> tuple[str, ...]:
        """Where a change of the namespace goes: the live collection, and while a rebuild is
        pending also the one it fills (once it exists: the copy reads SQL from the start).
        The live one is skipped then if it is missing or unusable: it is being replaced."""
        if namespace not in rebuilding:
            return (LIVE,)
        return tuple(slot for slot in (LIVE, NEXT) if self.index.writable(namespace, slot))

    def _apply(self, namespace: str, ids: list[int], slots: Sequence[str] = (LIVE,)) -> None:
        """Make the index hold exactly the current active state of ``ids``."""
        rows = self.db.memories.many(namespace, ids)
        active = [row for row in rows if row.status == MemoryStatus.ACTIVE]
        gone = sorted(set(ids) - {row.id for row in active})
        if gone:
            self.index.delete(namespace, gone, slots=slots)
            # Rows erased from SQL (a forget, a purge): their bytes go from Chroma's files too.
            self._compact_due |= len(rows) < len(set(ids))
        if active:
            self.index.upsert(
                namespace,
                [IndexItem.of(row) for row in active],
                slots=slots,
            )

    def _compact_if_due(self, lease: Lease) -> None:
        """Compact an embedded Chroma if vectors of erased memories or a replaced collection
        went since the last time; a failure is logged (the next erasure compacts it all)."""
        if not self._compact_due:
            return
        self._compact_due = False
        lease.renew()
        try:
            compacted = self._compact()
        except CompactionFailed as exc:
            logger.warning("{}", exc)
            return
        if compacted is not None:
            logger.info("vector index compacted: {}", compacted)

    def _scrub_new_segments(self) -> None:
        """Zero what Chroma wrote of its heap into a collection's HNSW files when it created
        them (``store.vector.segments``), once per directory and process: the index is written
        here alone meanwhile (the lease). A failure is logged: compaction does it again."""
        path = self.index.path
        if path is None:
            return
        try:
            for segment in segment_dirs(path):
                if segment.name not in self._scrubbed:
                    scrub(segment)
                    self._scrubbed.add(segment.name)
        except OSError as exc:
            logger.warning("zeroing the unused part of the vector index's files failed: {}", exc)

    def _compact(self) -> Compacted | None:
        """Compact an embedded Chroma so that what was deleted from it leaves no byte in its
        files; None for a server, whose operator does that (docs/operations.md). Raise
        CompactionFailed."""
        path = self.index.path
        return None if path is None else compact(path)

    @contextmanager
    def _writing(self, wait: float | None = None) -> Iterator[Lease | None]:
        """Hold the index's write lease for the block; None if another process kept it for
        ``wait`` seconds (SYNC_WAIT_SECONDS by default)."""
        lease = Lease(
            self.db.engine,
            holder=holder_id(),
            ttl=timedelta(seconds=SYNC_LEASE_SECONDS),
            name=SYNC_LEASE,
        )
        if not _take(lease, SYNC_WAIT_SECONDS if wait is None else wait):
            yield None
            return
        try:
            yield lease
        finally:
            lease.release()

    def _batch_done(self) -> None:
        if self.status is not None:
            self.status.current()  # reads SQL only if the snapshot went stale

    @staticmethod
    def _left(limit: int | None, done: int) -> int | None:
        return None if limit is None else limit - done

    def verify(self, namespace: str) -> Drift:
        """Compare the index with SQL for one namespace."""
        truth = self.db.memories.index_state(namespace)
        held = self.index.versions(namespace)
        return Drift(
            namespace=namespace,
            missing=tuple(sorted(set(truth) - set(held))),
            extra=tuple(sorted(set(held) - set(truth))),
            stale=tuple(sorted(i for i in set(truth) & set(held) if truth[i] != held[i])),
        )

    def namespaces(self) -> list[str]:
        """Namespaces known to SQL or to the index, and those with a rebuild pending."""
        known = set(self.db.memories.namespaces()) | set(self.index.namespaces())
        return sorted(known | set(self.db.rebuilds.pending()))

    def repair(self, drift: Drift) -> None:
        """Fix a drift found by ``verify`` without dropping the whole namespace."""
        self.index.delete(drift.namespace, list(drift.extra))
        todo = list(drift.missing + drift.stale)
        for start in range(0, len(todo), self.batch_size):
            self._apply(drift.namespace, todo[start : start + self.batch_size])
