"""Background work of the API process: applying the vector-index outbox, and warming up.

Ingest only writes SQL (with its outbox rows); the ``IndexWorker`` brings Chroma up to date every
``interval`` seconds, or at once after ``kick()``. If Chroma is down the worker backs off and tries
again later; nothing is lost because the outbox stays in SQL until Chroma has applied it.

The ``Warmer`` loads, once at start, what the first search of each namespace would otherwise wait
for: the embedding model, the namespace's BM25 index and its vector collection (seconds at 100k
memories); a server then settles its heap (``settle_heap``).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence

from loguru import logger
from sqlalchemy.exc import SQLAlchemyError

from store.vector.embedder import EmbedderError
from store.vector.index import VectorIndexError

MAX_BACKOFF = 60.0  # seconds between attempts while the index keeps failing


def backoff_delay(failures: int, *, interval: float, cap: float = MAX_BACKOFF) -> float:
    """Given consecutive failures (>= 1), return the wait before the next try: doubling, capped."""
    exponent = min(failures - 1, 30)  # beyond 2**30 the cap has long won; avoids huge floats
    return float(min(cap, interval * 2**exponent))


class IndexWorker:
    """Calls ``sync`` every ``interval`` seconds and on ``kick()``; survives index failures."""

    def __init__(
        self, sync: Callable[[], int], *, interval: float = 1.0, max_backoff: float = MAX_BACKOFF
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._sync = sync
        self._interval = interval
        self._max_backoff = max_backoff
        self._wake = threading.Event()  # set by kick() and close()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0  # consecutive failed attempts, for health reporting

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="index-worker", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Ask for a sync now (e.g. after an ingest); ignored while backing off from a failure."""
        self._wake.set()

    def run_once(self) -> bool:
        """Sync once; return False (after logging) if the index or the database failed."""
        try:
            applied = self._sync()
        except (VectorIndexError, EmbedderError, SQLAlchemyError) as exc:
            self.failures += 1
            delay = backoff_delay(self.failures, interval=self._interval, cap=self._max_backoff)
            logger.warning(
                "vector index sync failed ({} in a row), retrying in {:.1f} s: {}",
                self.failures,
                delay,
                exc,
            )
            return False
        if self.failures:
            logger.info("vector index sync works again after {} failures", self.failures)
        self.failures = 0
        if applied:
            logger.debug("applied {} outbox entries to the vector index", applied)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.failures:
                # Kicks do not shorten a backoff: each ingest would otherwise hammer a dead index.
                self._stop.wait(
                    backoff_delay(self.failures, interval=self._interval, cap=self._max_backoff)
                )
            else:
                self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._attempt()

    def _attempt(self) -> None:
        # The thread's boundary: an unexpected error is logged and counted as a failure (so the
        # next try backs off) instead of silently ending indexing for the life of the process.
        try:
            self.run_once()
        except Exception:  # noqa: BLE001 - thread boundary; logged with traceback
            self.failures += 1
            logger.exception("vector index sync failed unexpectedly")

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread, letting a sync in progress finish (bounded by ``timeout``)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)


def settle_heap() -> None:
    """Collect garbage once, then leave every object alive now out of later collections.

    For a server that has warmed up: what it holds then (modules, the model, the indexes, the
    clients) lives as long as the process, and a full collection walking all of it stalled a
    search every few hundred by ~100 ms (``bench/latency.py`` over HTTP at 100k memories,
    2026-11-27: the worst of 200 requests took 115-125 ms, and 24-27 ms with the heap
    settled). Objects made later are collected as before.
    """
    gc.collect()
    gc.freeze()


class Warmer:
    """Runs ``warm(namespace)`` for each namespace once, in a background thread, and then
    ``then()`` (``settle_heap`` in a server)."""

    def __init__(
        self,
        namespaces: Callable[[], Sequence[str]],
        warm: Callable[[str], None],
        *,
        then: Callable[[], None] | None = None,
    ) -> None:
        self._namespaces = namespaces
        self._warm = warm
        self._then = then
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = threading.Event()  # set when every namespace was warmed (or tried)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="warm-up", daemon=True)
            self._thread.start()

    def run(self) -> None:
        """Warm every namespace now, in this thread; failures are logged, not raised."""
        started = time.monotonic()
        try:
            names = list(self._namespaces())
        except SQLAlchemyError as exc:
            logger.warning("warm-up skipped: cannot list the namespaces: {}", exc)
            names = []
        for namespace in names:
            if self._stop.is_set():
                break
            try:
                self._warm(namespace)
            except (VectorIndexError, EmbedderError, SQLAlchemyError) as exc:
                # The search path degrades the same way; warming up only saves time.
                logger.warning("warm-up of namespace {!r} incomplete: {}", namespace, exc)
        if self._then is not None and not self._stop.is_set():
            self._then()
        logger.info(
            "warm-up of {} namespaces took {:.1f} s", len(names), time.monotonic() - started
        )
        self.done.set()

    def _run(self) -> None:
        try:
            self.run()
        except Exception:  # noqa: BLE001 - thread boundary; logged with traceback
            logger.exception("warm-up failed unexpectedly")
            self.done.set()

    def close(self, timeout: float = 10.0) -> None:
        """Stop after the namespace being warmed (bounded by ``timeout``)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
