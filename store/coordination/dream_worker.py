"""Running queued dream requests: the loop the daemon uses, and a worker for an API on its own.

Running the jobs is the secretary's business, which the store cannot import: whoever serves
requests hands in a ``run`` callable (a request in, its outcomes out, or None if it stopped
before finishing). ``run_pending`` claims requests one at a time and stores what ``run``
returned. Under `secretary run` the daemon calls it; `secretary serve` has no daemon, so its
API starts a ``DreamWorker`` that does the same while no daemon holds the store's lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from loguru import logger
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from store.clock import utc_now
from store.coordination.dream_requests import DreamRequests, DreamRequestView
from store.coordination.leases import Lease, holder_id, live_daemons

RunRequest = Callable[[DreamRequestView], Sequence[Mapping[str, Any]] | None]


def _nothing() -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class Dreamer:
    """What the jobs' side gives the API so that it can take dream requests."""

    jobs: tuple[str, ...]  # the job names a request may name, in the order a cycle runs them
    # Runs a request in this process (`secretary serve`); None where the daemon runs them.
    run: RunRequest | None = None
    stop: Callable[[], None] = field(default=_nothing)  # a run in progress ends after its job
    poll_seconds: float = 5.0
    lease_seconds: float = 60.0
    stop_timeout_seconds: float = 60.0
    # Why the jobs that need a model cannot run here (none configured), for whoever asks for
    # a dream that this process would run; None when they can.
    unable: str | None = None


def run_pending(
    requests: DreamRequests,
    *,
    picker: str,
    run: RunRequest,
    clock: Callable[[], datetime] = utc_now,
    stopping: Callable[[], bool] = lambda: False,
) -> int:
    """Claim and run requests, oldest first, until none is left, ``stopping()`` or a run stops
    early; return how many were claimed. ``picker`` must hold a lease meanwhile (see
    ``DreamRequests.claim``).
    """
    claimed = 0
    while not stopping():
        request = requests.claim(picker=picker, now=clock())
        if request is None:
            break
        claimed += 1
        if not run_claimed(requests, request, picker=picker, run=run, clock=clock):
            break
    return claimed


def run_claimed(
    requests: DreamRequests,
    request: DreamRequestView,
    *,
    picker: str,
    run: RunRequest,
    clock: Callable[[], datetime] = utc_now,
) -> bool:
    """Run a request ``picker`` has claimed and store its outcomes (or its error); return
    False if the run stopped before its end (the request is left to the next taker)."""
    where = request.namespace or "every namespace with work"
    logger.info("dream request #{} ({}) started on {}", request.id, request.requested_by, where)
    error: str | None = None
    try:
        outcomes = run(request)
    except BaseException as exc:  # the request's boundary: what went wrong is its outcome
        if not isinstance(exc, Exception):
            raise  # an interrupt or an exit: the request is left to the next taker
        logger.exception("dream request #{} failed", request.id)
        outcomes, error = (), f"{type(exc).__name__}: {exc}"
    if outcomes is None:
        logger.info("dream request #{} stopped before its end: left for the next taker", request.id)
        return False
    if requests.finish(request.id, picker=picker, outcomes=outcomes, now=clock(), error=error):
        logger.info("dream request #{} {}", request.id, "failed" if error else "done")
    else:
        logger.warning("dream request #{} was taken over meanwhile: outcomes dropped", request.id)
    return True


class DreamWorker:
    """Runs dream requests in this process while no daemon runs on the store.

    It holds a lease of its own (``dreamer:HOLDER``), renewed by a heartbeat thread, so that
    another process takes its request over only once this one is gone.
    """

    def __init__(
        self,
        requests: DreamRequests,
        dreamer: Dreamer,
        *,
        engine: Engine,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if dreamer.run is None:
            raise ValueError("a DreamWorker needs a dreamer that runs requests")
        self._requests = requests
        self._dreamer = dreamer
        self._run = dreamer.run
        self._engine = engine
        self._clock = clock
        holder = holder_id()
        ttl = timedelta(seconds=dreamer.lease_seconds)
        self.lease = Lease(engine, holder=holder, ttl=ttl, clock=clock, name=f"dreamer:{holder}")
        self._held = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        self._threads = [
            threading.Thread(target=self._work, name="dream-worker", daemon=True),
            threading.Thread(target=self._heartbeat, name="dream-heartbeat", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Stop claiming, let a request in progress end its current job (bounded), and give
        the lease up; an unfinished request is then taken over by the next daemon or worker."""
        self._stop.set()
        self._dreamer.stop()
        for thread in self._threads:
            thread.join(self._dreamer.stop_timeout_seconds)
        if self._threads and self._threads[0].is_alive():
            logger.warning("a dream request still runs: leaving it for the next taker")
        if self._held:
            try:
                self.lease.release()
            except SQLAlchemyError as exc:
                logger.warning("could not release the dream worker's lease: {}", exc)

    def _work(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self._dreamer.poll_seconds)

    def tick(self) -> int:
        """Run what is queued unless a daemon runs on the store; return how many were claimed."""
        try:
            if self._daemon_running():
                return 0  # the daemon takes the requests
            if not self._held:
                self.lease.acquire()
                self._held = True
            return run_pending(
                self._requests,
                picker=self.lease.holder,
                run=self._run,
                clock=self._clock,
                stopping=self._stop.is_set,
            )
        except SQLAlchemyError as exc:
            logger.warning("dream requests: the database failed, trying again later: {}", exc)
            return 0

    def _daemon_running(self) -> bool:
        return bool(live_daemons(self._engine, self._clock()))

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._dreamer.lease_seconds / 3):
            if not self._held:
                continue
            try:
                if not self.lease.renew():
                    self.lease.acquire()  # our row vanished: no one else uses its name
            except SQLAlchemyError as exc:
                logger.warning("cannot renew the dream worker's lease, trying again: {}", exc)
