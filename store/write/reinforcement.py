"""Reinforcement of recalled memories, batched off the request path.

A search only counts the ids it returned (``Reinforcer.record``, O(1) per id under a lock); a
background thread (the API's) writes the counts with ``Writer.reinforce`` every
``flush_seconds``, so a burst of searches costs one UPDATE per distinct count instead of one
transaction per request. A one-off search (the CLI's) is written when the store closes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import datetime

from loguru import logger
from sqlalchemy.exc import SQLAlchemyError

from store.settings import ReinforcementSettings
from store.write.writer import Writer

MAX_PENDING = 100_000  # distinct ids held in memory between flushes


def merge_counts(pending: dict[int, int], counts: Mapping[int, int], *, cap: int) -> int:
    """Add ``counts`` into ``pending`` without growing it beyond ``cap`` ids; return ids dropped.

    Ids already pending always get their counts; only new ids are refused once the map is full.
    """
    dropped = 0
    for memory_id, count in counts.items():
        if memory_id in pending:
            pending[memory_id] += count
        elif len(pending) < cap:
            pending[memory_id] = count
        else:
            dropped += 1
    return dropped


class Reinforcer:
    """Thread-safe queue of recalls; ``flush()`` writes them, ``close()`` flushes and stops."""

    def __init__(
        self,
        writer: Writer,
        settings: ReinforcementSettings,
        *,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._writer = writer
        self._settings = settings
        self._max_pending = max_pending
        self._pending: dict[int, int] = {}
        self._latest: datetime | None = None
        self._dropped = 0
        self._lock = threading.Lock()  # guards _pending, _latest and _dropped
        self._flushing = threading.Lock()  # one flush at a time, so counts are never written twice
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Return how many distinct memories wait to be reinforced."""
        with self._lock:
            return len(self._pending)

    def record(self, ids: Iterable[int], now: datetime) -> None:
        """Count one recall of each id at ``now``; nothing is written until the next flush."""
        counts: dict[int, int] = {}
        for memory_id in ids:
            counts[memory_id] = counts.get(memory_id, 0) + 1
        if not counts:
            return
        with self._lock:
            self._remember(counts, now)

    def _remember(self, counts: Mapping[int, int], now: datetime | None) -> None:
        """Merge counts under the lock (the caller holds it) and warn once per full episode."""
        dropped = merge_counts(self._pending, counts, cap=self._max_pending)
        if dropped and not self._dropped:
            logger.warning(
                "reinforcement queue is full ({} memories); dropping recalls until the next flush",
                self._max_pending,
            )
        self._dropped += dropped
        if now is not None and (self._latest is None or now > self._latest):
            self._latest = now

    def flush(self) -> int:
        """Write the pending counts; return how many memories were reinforced.

        On a database error the counts go back into the queue for the next try and 0 is returned.
        """
        with self._flushing:
            with self._lock:
                counts, now, dropped = self._pending, self._latest, self._dropped
                self._pending, self._latest, self._dropped = {}, None, 0
            if dropped:
                logger.warning("reinforcement dropped {} recalls while its queue was full", dropped)
            if not counts or now is None:
                return 0
            try:
                self._writer.reinforce(
                    counts,
                    now=now,
                    step=self._settings.importance_step,
                    max_boost=self._settings.max_boost,
                )
            except SQLAlchemyError as exc:
                logger.warning("reinforcement flush of {} memories failed: {}", len(counts), exc)
                with self._lock:
                    self._remember(counts, now)
                return 0
            logger.debug("reinforced {} memories", len(counts))
            return len(counts)

    def start(self) -> None:
        """Start the background thread that flushes every ``flush_seconds``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="reinforcer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._settings.flush_seconds):
            # The thread's boundary: a bug in one flush must not end reinforcement for good.
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - thread boundary; logged with traceback
                logger.exception("reinforcement flush failed unexpectedly")

    def close(self, timeout: float = 10.0) -> None:
        """Stop the background thread (if any) and flush what is pending."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.flush()
