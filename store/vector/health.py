"""What the vector index is known to be: reachable or not, being rebuilt, behind the outbox, or
holding another number of vectors than SQL has memories. Searches say so in ``degraded``,
/healthz in its report.

Nothing here runs per search. A search reads the last snapshot; the snapshot's SQL part (the
pending rebuilds and the outbox's size: small reads) is taken again at most every
``refresh_seconds``, by the API's index worker as it syncs or, in a process without one, by the
first search after it went stale. Reaching Chroma (a heartbeat) and counting its vectors is
left to the worker's ``check``: never a search's or a health poll's wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from store.coordination.rebuilds import RebuildMark, RebuildTable
from store.db import DatabaseError
from store.reads.indexing import IndexingReads
from store.vector.embedder import EmbedderError
from store.vector.index import IncompatibleCollection, VectorIndex, VectorIndexError

BACKLOG_NOTED = 1000  # outbox entries beyond which searches say the index is behind
BACKLOG_SCAN = 20_000  # the oldest entries counted per namespace (a full count costs seconds)
REFRESH_SECONDS = 5.0  # how old the SQL part of the snapshot may be
PROBE_SECONDS = 10.0  # between heartbeats to Chroma
COUNT_SECONDS = 300.0  # between comparisons of vector and memory counts
# Namespaces counted per comparison, taking turns: a store of thousands of namespaces is not
# counted all at once (one request each to a Chroma server that serves the night's jobs too).
COUNT_BATCH = 100


@dataclass(frozen=True, kw_only=True)
class Miscount:
    """A namespace whose vectors do not number its active memories, with nothing pending."""

    memories: int
    vectors: int


@dataclass(frozen=True, kw_only=True)
class VectorHealth:
    """A snapshot of what is known about the vector index."""

    reachable: bool | None = None  # None: this process has not tried yet
    error: str | None = None  # why it was not reachable
    rebuilding: Mapping[str, RebuildMark] = field(default_factory=dict)
    outbox: int = 0  # entries waiting to reach the index
    behind: Mapping[str, int] = field(default_factory=dict)  # among the oldest BACKLOG_SCAN
    miscounted: Mapping[str, Miscount] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """One word: unreachable, rebuilding, miscounted, behind, ok, or unchecked."""
        if self.reachable is False:
            return "unreachable"
        if self.rebuilding:
            return "rebuilding"
        if self.miscounted:
            return "miscounted"
        if self.outbox > BACKLOG_NOTED:
            return "behind"
        return "ok" if self.reachable else "unchecked"

    @property
    def incomplete(self) -> bool:
        """Whether vector answers may miss memories (or the index cannot answer at all)."""
        return self.state not in ("ok", "unchecked")

    def notes(self, namespace: str) -> tuple[str, ...]:
        """Why a search of ``namespace`` may miss memories on its vector side, if it may."""
        found = []
        mark = self.rebuilding.get(namespace)
        if mark is not None:
            found.append(
                f"vector index rebuild pending ({mark.copied:,} of {mark.total:,} memories "
                "copied): vector results come from the index being replaced and may be "
                "incomplete"
            )
        if self.outbox > BACKLOG_NOTED and (namespace in self.behind or self.outbox > BACKLOG_SCAN):
            found.append(
                f"vector index {self.outbox:,} changes behind: the newest memories may be "
                "missing from vector results"
            )
        miscount = self.miscounted.get(namespace)
        if miscount is not None:
            found.append(
                f"vector index holds {miscount.vectors:,} vectors for {miscount.memories:,} "
                "memories: run `secretary index verify`"
            )
        return tuple(found)

    def report(self) -> dict[str, Any]:
        """The snapshot as /healthz shows it."""
        return {
            "status": self.state,
            "reachable": self.reachable,
            "error": self.error,
            "outbox": self.outbox,
            "rebuilding": [
                {"namespace": m.namespace, "phase": m.phase, "copied": m.copied, "total": m.total}
                for m in self.rebuilding.values()
            ],
            "miscounted": [
                {"namespace": ns, "memories": m.memories, "vectors": m.vectors}
                for ns, m in sorted(self.miscounted.items())
            ],
        }


class IndexStatus:
    """Keeps the ``VectorHealth`` snapshot of one store; safe to use from any thread."""

    def __init__(
        self,
        *,
        rebuilds: RebuildTable,
        reads: IndexingReads,
        index: Callable[[], VectorIndex],
        refresh_seconds: float | None = None,
        probe_seconds: float | None = None,
        count_seconds: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rebuilds = rebuilds
        self._reads = reads
        self._index = index
        # None: the module's constant as it is now (tests shorten them).
        self._refresh_seconds = _given(refresh_seconds, REFRESH_SECONDS)
        self._probe_seconds = _given(probe_seconds, PROBE_SECONDS)
        self._count_seconds = _given(count_seconds, COUNT_SECONDS)
        self._monotonic = monotonic
        self._health = VectorHealth()
        self._taken_at: float | None = None  # when the SQL part was last read
        self._probed_at: float | None = None
        self._counted_at: float | None = None
        self._count_cursor: str | None = None  # the last namespace counted
        self._refreshing = threading.Lock()  # one reader of SQL at a time
        self._publishing = threading.Lock()  # no update lost between threads

    def current(self) -> VectorHealth:
        """Return the snapshot, reading its SQL part again first if stale: by one caller at a
        time, the others get the stale one meanwhile (the very first caller waits)."""
        taken = self._taken_at
        if taken is not None and self._monotonic() - taken < self._refresh_seconds:
            return self._health
        if self._refreshing.acquire(blocking=taken is None):
            try:
                self._refresh()
            except DatabaseError as exc:
                # Searches and /healthz meet the database's failure on their own.
                logger.warning("vector index health: cannot read the database: {}", exc)
                self._taken_at = self._monotonic()
            finally:
                self._refreshing.release()
        return self._health

    def last(self) -> VectorHealth:
        """Return the snapshot as it is, reading nothing (when the database is down, say)."""
        return self._health

    def notes(self, namespace: str) -> tuple[str, ...]:
        """Why a search of ``namespace`` may miss memories on its vector side (cached)."""
        return self.current().notes(namespace)

    def refresh(self) -> VectorHealth:
        """Read the SQL part now (after a rebuild was asked for or finished, say)."""
        with self._refreshing:
            self._refresh()
        return self._health

    def reached(self) -> None:
        """Record that the index answered."""
        if self._health.reachable is False:
            logger.info("the vector index answers again")
        self._publish(reachable=True, error=None)

    def failed(self, exc: Exception) -> None:
        """Record that the index could not be reached or failed."""
        if self._health.reachable is not False:
            logger.warning("the vector index is unavailable: {}", exc)
        self._publish(reachable=False, error=str(exc))

    def check(self) -> VectorHealth:
        """What the index worker runs between syncs: a heartbeat every ``probe_seconds``, a
        count of vectors against memories every ``count_seconds``, and the SQL part."""
        now = self._monotonic()
        if _due(self._probed_at, now, self._probe_seconds):
            self._probed_at = now
            try:
                self._index().ping()
            except (VectorIndexError, EmbedderError) as exc:
                self.failed(exc)
            else:
                self.reached()
        if self._health.reachable and _due(self._counted_at, now, self._count_seconds):
            self._counted_at = now
            try:
                self._count()
            except (VectorIndexError, EmbedderError) as exc:
                self.failed(exc)
        return self.refresh()

    def _refresh(self) -> None:
        marks = self._rebuilds.pending()
        outbox, behind = self._reads.backlog(scan=BACKLOG_SCAN)
        # A namespace being rebuilt is reported as that; its old count no longer matters.
        miscounted = {ns: m for ns, m in self._health.miscounted.items() if ns not in marks}
        self._publish(rebuilding=marks, outbox=outbox, behind=behind, miscounted=miscounted)
        self._taken_at = self._monotonic()

    def _count(self) -> None:
        """Compare each namespace's vectors with its active memories where nothing is pending.

        A namespace counts only if it had no outbox entry and no rebuild, and its revision did
        not move, from before the counts to after them: then SQL and the index hold still and
        must agree. Otherwise the earlier verdict on it stands.
        """
        outbox, behind = self._reads.backlog(scan=BACKLOG_SCAN)
        if outbox > BACKLOG_SCAN:
            return  # too busy to tell: the backlog is reported anyway
        revisions, marks = self._reads.revisions(), self._rebuilds.pending()
        memories = self._reads.active_counts()
        index = self._index()
        quiet = sorted((revisions.keys() | memories.keys()) - behind.keys() - marks.keys())
        chosen = next_batch(quiet, after=self._count_cursor, size=COUNT_BATCH)
        self._count_cursor = chosen[-1] if chosen else None
        vectors = {ns: n for ns in chosen if (n := _count_of(index, ns)) is not None}
        _, behind_after = self._reads.backlog(scan=BACKLOG_SCAN)
        moved = {ns for ns, rev in self._reads.revisions().items() if revisions.get(ns) != rev}
        verdicts = dict(self._health.miscounted)
        for ns in vectors:
            if ns in moved or ns in behind_after:
                continue
            if vectors[ns] == memories.get(ns, 0):
                verdicts.pop(ns, None)
            else:
                verdicts[ns] = Miscount(memories=memories.get(ns, 0), vectors=vectors[ns])
                logger.warning(
                    "the vector index holds {} vectors for namespace {!r}, which has {} active "
                    "memories: run `secretary index verify`",
                    vectors[ns],
                    ns,
                    memories.get(ns, 0),
                )
        self._publish(miscounted=verdicts)

    def _publish(self, **changes: Any) -> None:
        with self._publishing:
            self._health = replace(self._health, **changes)


def _count_of(index: VectorIndex, namespace: str) -> int | None:
    """Return the namespace's vectors; None if its collection is unusable as it is (searches
    say so themselves: it needs a rebuild, or is another store's)."""
    try:
        return index.count(namespace)
    except IncompatibleCollection:
        return None


def next_batch(names: list[str], *, after: str | None, size: int) -> list[str]:
    """The next ``size`` of the sorted ``names`` after ``after``, going round to the start."""
    later = [name for name in names if after is None or name > after]
    return (later + [name for name in names if name not in later])[:size]


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def _due(last: float | None, now: float, every: float) -> bool:
    return last is None or now - last >= every
