"""Dispatching a night's work: firings and dream requests cut into units that run concurrently.

A scheduled job's firing, or a dream request, is opened as a firing in the database
(``store.coordination.firings``) with one unit per namespace with work, the longest waiting first;
its key makes it happen once however many daemons fire it. Every daemon's ``Dispatcher`` takes
units (its ``UnitWorker``): up to ``[jobs] concurrency`` at once, each running the firing's jobs
in order on its namespace, under a lease its heartbeat renews. The claim keeps a namespace to one
unit at a time and its units in the order of their firings, across daemons; a unit whose daemon
was killed is taken over once its lease lapses. The one who opened a firing waits for its end (a
dream request then stores the outcomes of every unit).

The ``Dispatcher`` also knows what runs right now (for systemd's STATUS line) and lets the daemon
stop: no unit is claimed any more, a unit between two jobs is given back, and the running runs
are waited for, bounded. Each run is ``secretary.runner.run_job``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Protocol

from loguru import logger

from secretary.config import Settings
from secretary.jobs.registry import JOB_NAMES, get_job
from secretary.logs import Outage, error_line
from secretary.outcomes import RunOutcome, make_outcome
from secretary.runner import run_job
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import Dreamer
from store.coordination.firings import Firings, FiringView, UnitView
from store.coordination.leases import holder_id
from store.db import DatabaseError
from store.errors import SecretaryError
from store.service import Store

# How often a waiting opener, and an idle worker, look at the firings again.
POLL_SECONDS = 0.5
# A dream request's outcomes so far are stored at most every PROGRESS_SECONDS (a night of 1,000
# namespaces ends a unit a second), and each store, which reads and writes all of them (1.5 s at
# 10,000 namespaces, 60,000 outcomes), is followed by PROGRESS_PAUSE times as long without one.
PROGRESS_SECONDS = 5.0
PROGRESS_PAUSE = 10
DREAM_PREFIX = "dream:"


class JobCalls(Protocol):
    """What the dispatcher needs from the jobs: which namespaces have work (the longest waiting
    for ``job`` first), one run, and where a dream request's progress goes."""

    def namespaces(self, job: str) -> Sequence[str]: ...

    def run(
        self,
        job: str,
        namespace: str,
        *,
        settings: Settings,
        now: datetime,
        manual: bool,
        retry_quarantined: bool,
    ) -> RunOutcome: ...

    def progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        """Keep what a dream request's runs said so far (``dream`` calls it as units end)."""


class RunnerCalls:
    """``secretary.runner`` bound to a store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def namespaces(self, job: str) -> Sequence[str]:
        return self._store.db.work.namespaces_waiting_longest(job)

    def run(
        self,
        job: str,
        namespace: str,
        *,
        settings: Settings,
        now: datetime,
        manual: bool,
        retry_quarantined: bool,
    ) -> RunOutcome:
        return run_job(
            self._store,
            settings,
            job,
            namespace,
            now=now,
            retry_quarantined=retry_quarantined,
            # Someone asked for it now: a back-off after failed runs gives way.
            manual=manual,
        )

    def progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        """Store the outcomes of a request's runs so far, for whoever follows it."""
        if request.picked_by is not None:
            self._store.db.dream_requests.progress(
                request.id, picker=request.picked_by, outcomes=outcomes
            )


def outcome_json(outcome: RunOutcome) -> dict[str, Any]:
    """What a unit (and a dream request) stores of a run: job, namespace, status, the record to
    name first and every record it wrote, message."""
    return {
        "job": outcome.job,
        "namespace": outcome.namespace,
        "status": outcome.status,
        "record_id": outcome.record_id,
        "records": list(outcome.records),
        "message": outcome.message,
    }


def firing_key(job: str, at: datetime) -> str:
    """The key of ``job``'s firing due at ``at``: its minute (a cron's finest step), so that the
    daemons firing it at that minute open one firing."""
    return f"{job}@{at.replace(second=0, microsecond=0).isoformat()}"


class Dispatcher:
    """Opens firings and dream requests as units and runs units, ``[jobs] concurrency`` at once.

    ``dreams_only`` (`secretary serve`, which is no daemon) takes the units of dream requests
    only, never those of a scheduled firing a daemon left.
    """

    def __init__(
        self,
        calls: JobCalls,
        firings: Firings,
        *,
        settings: Settings,
        holder: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        on_status: Callable[[str], object] = lambda _: None,
        dreams_only: bool = False,
    ) -> None:
        self.settings = settings  # replaced on reload; each run reads it once, at its start
        self.holder = holder or holder_id()
        self._calls = calls
        self._firings = firings
        self._clock = clock
        self._on_status = on_status
        self._changed = threading.Condition()
        self._waiting = 0  # openers waiting for their firing's end
        self._running: list[tuple[str, str]] = []  # (job, namespace) of the runs in progress
        self._held: dict[int, UnitView] = {}  # units claimed and not finished
        self._claiming = False  # a claim is in flight
        self._stopping = False
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None
        self._concurrency = settings.jobs.concurrency
        self._dreams_only = dreams_only
        self._claims_down = Outage("cannot claim work, trying again")

    # -- opening ----------------------------------------------------------------------------------

    def fire(self, job: str, *, at: datetime | None = None) -> None:
        """Open ``job``'s firing due at ``at`` (default: now) over every namespace with work, or
        join it if another daemon did; wait until its units are done or the dispatcher stops."""
        get_job(job)
        key = firing_key(job, at or self._clock())
        with self._opening() as going:
            if not going:
                return
            try:
                firing, opened = self._firings.open(
                    key,
                    jobs=(job,),
                    namespaces=self._calls.namespaces(job),
                    opened_by=self.holder,
                    now=self._clock(),
                )
            except DatabaseError as exc:
                logger.error("{}: cannot open its firing, skipping it: {}", job, exc)
                return
            self._announce(firing, opened)
            self._wait_for(firing)

    def dream(self, request: DreamRequestView) -> list[dict[str, Any]] | None:
        """Run a dream request: its jobs (default: all, in order) on its namespace (default: each
        with work), as a firing every daemon helps with. Return the outcomes, namespace by
        namespace, or None if stopped before the end (the request is left to the next taker).
        Raise UnknownJob before anything runs.
        """
        names = list(request.jobs) or list(JOB_NAMES)
        for name in names:
            get_job(name)
        with self._opening() as going:
            if not going:
                return None
            namespaces = (
                [request.namespace] if request.namespace else self._calls.namespaces(names[0])
            )
            firing, opened = self._firings.open(
                f"{DREAM_PREFIX}{request.id}",
                jobs=names,
                namespaces=namespaces,
                opened_by=self.holder,
                now=self._clock(),
                manual=True,
                retry_quarantined=request.retry_quarantined,
            )
            self._announce(firing, opened)
            return self._wait_for(firing, request=request)

    # -- the daemon's side ------------------------------------------------------------------------

    def start(self) -> None:
        """Start taking units (those of firings left open by a daemon that stopped, too)."""
        with self._changed:
            if self._threads or self._stopping:
                return
            self._pool = ThreadPoolExecutor(self._concurrency, thread_name_prefix="unit")
            self._threads = [
                threading.Thread(target=self._claim_loop, name="units", daemon=True),
                threading.Thread(target=self._heartbeat, name="units-lease", daemon=True),
            ]
        for thread in self._threads:
            thread.start()

    @property
    def stopping(self) -> bool:
        with self._changed:
            return self._stopping

    def running(self) -> list[str]:
        """Describe the runs in progress, e.g. ["consolidator for maya"]."""
        with self._changed:
            return [f"{job} for {namespace}" for job, namespace in self._running]

    def held(self) -> list[UnitView]:
        """The units this dispatcher holds now."""
        with self._changed:
            return list(self._held.values())

    def stop(self) -> None:
        """Claim no unit any more; runs in progress go on to their commit (or rollback), and a
        unit is given back between its jobs."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._wake.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every unit and opener to end; return whether
        they did."""
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._held and not self._waiting and not self._claiming, timeout
            )

    # -- taking units -----------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        ttl = self._ttl()
        slots = threading.Semaphore(self._concurrency)
        while not self.stopping:
            if not slots.acquire(timeout=POLL_SECONDS):
                continue
            unit = self._claim(ttl)
            if unit is None:
                slots.release()
                self._wake.wait(POLL_SECONDS)
                self._wake.clear()
                continue
            assert self._pool is not None
            self._pool.submit(self._run_unit, unit, slots)
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def _claim(self, ttl: timedelta) -> UnitView | None:
        """Claim a unit and hold it; None if none may run, or once stopping (``wait_idle``
        counts a claim in flight, so a unit claimed as the stop came is given back first)."""
        with self._changed:
            if self._stopping:
                return None
            self._claiming = True
        try:
            unit = self._firings.claim(
                holder=self.holder,
                now=self._clock(),
                ttl=ttl,
                key_prefix=DREAM_PREFIX if self._dreams_only else None,
            )
            if unit is not None and self.stopping:
                self._firings.release(unit.id, holder=self.holder)
                unit = None
            self._claims_down.ok()
        except DatabaseError as exc:
            self._claims_down.failed(exc)
            unit = None
        finally:
            with self._changed:
                self._claiming = False
                if unit is not None:
                    self._held[unit.id] = unit
                self._changed.notify_all()
        return unit

    def _heartbeat(self) -> None:
        ttl = self._ttl()
        while True:
            with self._changed:
                self._changed.wait_for(
                    lambda: self._stopping and not self._held, ttl.total_seconds() / 3
                )
                if self._stopping and not self._held:
                    return
                ids = list(self._held)
            try:
                kept = self._firings.renew(ids, holder=self.holder, now=self._clock(), ttl=ttl)
            except DatabaseError as exc:
                logger.warning("cannot renew the leases of the units held: {}", exc)
                continue
            if kept < len(ids):
                logger.warning("{} unit(s) held were taken over by another daemon", len(ids) - kept)

    def _run_unit(self, unit: UnitView, slots: threading.Semaphore) -> None:
        outcomes: list[dict[str, Any]] = []
        finished = False
        try:
            for job in unit.firing.jobs:
                if self.stopping:
                    break
                outcomes.append(outcome_json(self._run(job, unit)))
                if len(unit.firing.jobs) > 1:
                    self._firings.progress_of_unit(unit.id, holder=self.holder, outcomes=outcomes)
            else:
                finished = self._firings.finish(
                    unit.id, holder=self.holder, outcomes=outcomes, now=self._clock()
                )
                if not finished:
                    logger.warning(
                        "{} on {!r}: its unit was taken over meanwhile; its outcomes are lost",
                        ", ".join(unit.firing.jobs),
                        unit.namespace,
                    )
            if not finished and self.stopping:
                self._firings.release(unit.id, holder=self.holder)
        except DatabaseError as exc:
            # The unit stays ours until its lease lapses; then it is taken again.
            logger.error("unit {} on {!r}: the database failed: {}", unit.id, unit.namespace, exc)
        finally:
            with self._changed:
                self._held.pop(unit.id, None)
                self._changed.notify_all()
            slots.release()
            self._wake.set()

    def _run(self, job: str, unit: UnitView) -> RunOutcome:
        namespace = unit.namespace
        self._track(job, namespace, running=True)
        try:
            outcome = self._calls.run(
                job,
                namespace,
                settings=self.settings,
                now=self._clock(),
                manual=unit.firing.manual,
                retry_quarantined=unit.firing.retry_quarantined,
            )
        except (SecretaryError, DatabaseError) as exc:
            # The job boundary records failures itself; these escaped it (e.g. the database went
            # away before a record could be written). The other namespaces still get their turn.
            logger.error("{} on {!r} ({}) failed: {}", job, namespace, unit.firing.key, exc)
            return make_outcome(job, namespace, "failed", error_line(exc))
        finally:
            self._track(job, namespace, running=False)
        record = f" (record #{outcome.record_id})" if outcome.record_id is not None else ""
        message = f": {outcome.message}" if outcome.message else ""
        logger.info(
            "{} on {!r} ({}): {}{}{}",
            job,
            namespace,
            unit.firing.key,
            outcome.status,
            record,
            message,
        )
        return outcome

    # -- waiting for a firing ---------------------------------------------------------------------

    @contextmanager
    def _opening(self) -> Iterator[bool]:
        """An opener's turn, counted while it waits (``wait_idle``); False once stopping."""
        with self._changed:
            if self._stopping:
                yield False
                return
            self._waiting += 1
        try:
            yield True
        finally:
            with self._changed:
                self._waiting -= 1
                self._changed.notify_all()

    def _announce(self, firing: FiringView, opened: bool) -> None:
        how = "opened" if opened else "joined (another daemon opened it)"
        logger.info("firing {} {}: jobs {}", firing.key, how, ", ".join(firing.jobs))
        self.start()
        self._wake.set()

    def _wait_for(
        self, firing: FiringView, *, request: DreamRequestView | None = None
    ) -> list[dict[str, Any]] | None:
        """Wait until every unit of ``firing`` is done and return their outcomes, or None if
        the dispatcher stops first, storing a dream request's progress as units end. A read
        the database fails is made again: once the work is done, a connection cut must not
        fail the request."""
        reported, next_report = -1, time.monotonic()
        down = Outage(f"firing {firing.key}: cannot read its progress, trying again")
        while True:
            try:
                progress = self._firings.progress(firing, now=self._clock())
                ended = progress.done == progress.total
                outcomes = self._firings.outcomes(firing.id) if ended else None
                down.ok()
            except DatabaseError as exc:
                down.failed(exc)
                progress = None
            if progress is not None:
                due = time.monotonic() >= next_report or ended
                if request is not None and progress.done != reported and due:
                    reported, began = progress.done, time.monotonic()
                    self._progress(request, firing, outcomes)
                    spent = time.monotonic() - began
                    next_report = began + max(PROGRESS_SECONDS, PROGRESS_PAUSE * spent)
                if outcomes is not None:
                    return outcomes
            with self._changed:
                if self._changed.wait_for(lambda: self._stopping, POLL_SECONDS):
                    return None

    def _progress(
        self, request: DreamRequestView, firing: FiringView, outcomes: list[dict[str, Any]] | None
    ) -> None:
        """Store the request's progress: ``outcomes`` if read already, else the firing's now."""
        try:
            if outcomes is None:
                outcomes = self._firings.outcomes(firing.id)
            self._calls.progress(request, outcomes)
        except DatabaseError as exc:  # only followers miss it: the outcomes are stored at the end
            logger.warning("dream request #{}: cannot store its progress: {}", request.id, exc)

    def _ttl(self) -> timedelta:
        return timedelta(seconds=self.settings.schedule.lease_seconds)

    def _track(self, job: str, namespace: str, *, running: bool) -> None:
        with self._changed:
            if running:
                self._running.append((job, namespace))
            else:
                self._running.remove((job, namespace))
            now_running = [f"{j} for {ns}" for j, ns in self._running]
        self._on_status("running " + ", ".join(now_running) if now_running else "idle")


# What a dream request run here without a model is told (Dreamer.unable).
NO_MODEL = (
    "no model is configured ([llm] model): the jobs that need one, the extractor among them, "
    "are skipped, so conversation turns are kept but no memories are extracted from them"
)


def in_process_dreamer(store: Store, settings: Settings) -> Dreamer:
    """What `secretary serve` gives its API: run the dream requests in this process, through a
    dispatcher of its own, while no daemon runs on the store."""
    dispatcher = Dispatcher(
        RunnerCalls(store), store.db.firings, settings=settings, dreams_only=True
    )
    schedule = settings.schedule
    return Dreamer(
        jobs=JOB_NAMES,
        run=dispatcher.dream,
        stop=dispatcher.stop,
        poll_seconds=schedule.poll_seconds,
        lease_seconds=schedule.lease_seconds,
        stop_timeout_seconds=schedule.stop_timeout_seconds,
        unable=None if settings.llm.model else NO_MODEL,
    )
