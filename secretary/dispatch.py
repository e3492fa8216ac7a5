"""Dispatching a firing of a scheduled job: every namespace with work, one namespace at a time.

APScheduler keeps a job from overlapping itself (max_instances=1); ``NamespaceLocks`` keep two
different jobs off one namespace, whose data they would both rewrite. A dream request (`secretary
dream`, POST /v1/dream) runs its jobs through the same locks, one job at a time, like firings.
``Dispatcher`` also knows what runs right now (for systemd's STATUS line) and lets the daemon
stop: no new run starts, and the running one is waited for, bounded. Each run is
``secretary.runner.run_job``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol

from loguru import logger

from secretary.config import Settings
from secretary.jobs.registry import JOB_NAMES, get_job
from secretary.outcomes import RunOutcome, make_outcome
from secretary.runner import run_job
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import Dreamer
from store.db import DatabaseError
from store.errors import SecretaryError
from store.service import Store


class NamespaceLocks:
    """One run per namespace at a time; after ``close()`` nobody waits any longer."""

    def __init__(self, *, on_wait: Callable[[str], object] = lambda _: None) -> None:
        self._changed = threading.Condition()
        self._busy: set[str] = set()
        self._closed = False
        self._on_wait = on_wait  # told when a caller has to wait (for logs, and for tests)

    def acquire(self, namespace: str) -> bool:
        """Wait until ``namespace`` is free and take it; return False if closed meanwhile."""
        with self._changed:
            if namespace in self._busy and not self._closed:
                self._on_wait(namespace)
            self._changed.wait_for(lambda: self._closed or namespace not in self._busy)
            if self._closed:
                return False
            self._busy.add(namespace)
            return True

    def release(self, namespace: str) -> None:
        with self._changed:
            self._busy.discard(namespace)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @contextmanager
    def hold(self, namespace: str) -> Iterator[bool]:
        """Hold ``namespace`` for the block; yield False (holding nothing) if closed."""
        taken = self.acquire(namespace)
        try:
            yield taken
        finally:
            if taken:
                self.release(namespace)


class JobCalls(Protocol):
    """What the daemon needs from the jobs: which namespaces have work, and one run (a scheduled
    one, reported as a line, or a requested one, reported as its outcome)."""

    def namespaces(self) -> Sequence[str]: ...

    def run(self, job: str, namespace: str, *, settings: Settings, now: datetime) -> str: ...

    def run_now(
        self,
        job: str,
        namespace: str,
        *,
        settings: Settings,
        now: datetime,
        retry_quarantined: bool,
    ) -> RunOutcome: ...

    def progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        """Keep what a dream request's runs said so far (``dream`` calls it after each run)."""


class RunnerCalls:
    """``secretary.runner`` bound to a store; ``run`` returns the outcome as one line."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def namespaces(self) -> Sequence[str]:
        return self._store.db.work.namespaces_with_work()

    def run(self, job: str, namespace: str, *, settings: Settings, now: datetime) -> str:
        outcome = run_job(self._store, settings, job, namespace, now=now)
        record = f" (record #{outcome.record_id})" if outcome.record_id is not None else ""
        message = f": {outcome.message}" if outcome.message else ""
        return f"{outcome.status}{record}{message}"

    def run_now(
        self,
        job: str,
        namespace: str,
        *,
        settings: Settings,
        now: datetime,
        retry_quarantined: bool,
    ) -> RunOutcome:
        return run_job(
            self._store,
            settings,
            job,
            namespace,
            now=now,
            retry_quarantined=retry_quarantined,
            manual=True,  # someone asked for it now: a back-off after failed runs gives way
        )

    def progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        """Store the outcomes of a request's runs so far, for whoever follows it."""
        if request.picked_by is not None:
            self._store.db.dream_requests.progress(
                request.id, picker=request.picked_by, outcomes=outcomes
            )


def outcome_json(outcome: RunOutcome) -> dict[str, Any]:
    """What a dream request stores of a run: job, namespace, status, the record to name first
    and every record it wrote, message."""
    return {
        "job": outcome.job,
        "namespace": outcome.namespace,
        "status": outcome.status,
        "record_id": outcome.record_id,
        "records": list(outcome.records),
        "message": outcome.message,
    }


class Dispatcher:
    """Runs a firing of a job over every namespace with work, serialised per namespace."""

    def __init__(
        self,
        calls: JobCalls,
        *,
        settings: Settings,
        clock: Callable[[], datetime] = utc_now,
        on_status: Callable[[str], object] = lambda _: None,
        locks: NamespaceLocks | None = None,
    ) -> None:
        self.settings = settings  # replaced on reload; each run reads it once, at its start
        self._calls = calls
        self._clock = clock
        self._on_status = on_status
        self._locks = locks or NamespaceLocks(on_wait=_log_wait)
        self._changed = threading.Condition()
        self._firings = 0
        self._running: list[tuple[str, str]] = []
        self._stopping = False

    def fire(self, job: str) -> None:
        """Run ``job`` on each namespace with work, one after another; stop early on ``stop()``."""
        with self._changed:
            if self._stopping:
                return
            self._firings += 1
        try:
            for namespace in self._namespaces(job):
                with self._locks.hold(namespace) as held:
                    if not held or self.stopping:
                        return
                    self._run(job, namespace)
        finally:
            with self._changed:
                self._firings -= 1
                self._changed.notify_all()

    def dream(self, request: DreamRequestView) -> list[dict[str, Any]] | None:
        """Run a dream request: its jobs (default: all, in order) on its namespace (default:
        each with work), each run holding its namespace like a firing. Return the outcomes, or
        None if stopped before the end. Raise UnknownJob before anything runs.
        """
        names = list(request.jobs) or list(JOB_NAMES)
        for name in names:
            get_job(name)
        with self._changed:
            if self._stopping:
                return None
            self._firings += 1
        try:
            namespaces = [request.namespace] if request.namespace else self._calls.namespaces()
            outcomes = []
            for namespace in namespaces:
                for job in names:
                    with self._locks.hold(namespace) as held:
                        if not held or self.stopping:
                            return None
                        outcomes.append(outcome_json(self._run_now(job, namespace, request)))
                    self._progress(request, outcomes)
            return outcomes
        finally:
            with self._changed:
                self._firings -= 1
                self._changed.notify_all()

    @property
    def stopping(self) -> bool:
        with self._changed:
            return self._stopping

    def running(self) -> list[str]:
        """Describe the runs in progress, e.g. ["consolidator for maya"]."""
        with self._changed:
            return [f"{job} for {namespace}" for job, namespace in self._running]

    def stop(self) -> None:
        """Start no new run; runs in progress go on to their commit (or rollback)."""
        with self._changed:
            self._stopping = True
        self._locks.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every firing to end; return whether they did."""
        with self._changed:
            return self._changed.wait_for(lambda: self._firings == 0, timeout)

    def _namespaces(self, job: str) -> Sequence[str]:
        try:
            return list(self._calls.namespaces())
        except DatabaseError as exc:
            logger.error("{}: cannot list the namespaces with work, skipping: {}", job, exc)
            return []

    def _run(self, job: str, namespace: str) -> None:
        self._track(job, namespace, running=True)
        try:
            summary = self._calls.run(job, namespace, settings=self.settings, now=self._clock())
            logger.info("{} on {!r}: {}", job, namespace, summary)
        except (SecretaryError, DatabaseError) as exc:
            # The job boundary records failures itself; these escaped it (e.g. the database went
            # away before a record could be written). The other namespaces still get their turn.
            logger.error("{} on {!r} failed: {}", job, namespace, exc)
        finally:
            self._track(job, namespace, running=False)

    def _run_now(self, job: str, namespace: str, request: DreamRequestView) -> RunOutcome:
        self._track(job, namespace, running=True)
        try:
            outcome = self._calls.run_now(
                job,
                namespace,
                settings=self.settings,
                now=self._clock(),
                retry_quarantined=request.retry_quarantined,
            )
        except (SecretaryError, DatabaseError) as exc:
            # As for a firing: the job boundary records failures itself; these escaped it.
            logger.error(
                "{} on {!r} (dream request #{}) failed: {}", job, namespace, request.id, exc
            )
            return make_outcome(job, namespace, "failed", f"{type(exc).__name__}: {exc}")
        finally:
            self._track(job, namespace, running=False)
        logger.info(
            "{} on {!r} (dream request #{}): {}", job, namespace, request.id, outcome.status
        )
        return outcome

    def _progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        try:
            self._calls.progress(request, outcomes)
        except DatabaseError as exc:  # only followers miss it: the outcomes are stored at the end
            logger.warning("dream request #{}: cannot store its progress: {}", request.id, exc)

    def _track(self, job: str, namespace: str, *, running: bool) -> None:
        with self._changed:
            if running:
                self._running.append((job, namespace))
            else:
                self._running.remove((job, namespace))
            now_running = [f"{j} for {ns}" for j, ns in self._running]
        self._on_status("running " + ", ".join(now_running) if now_running else "idle")


def _log_wait(namespace: str) -> None:
    logger.info("namespace {!r} is busy with another job: waiting for it", namespace)


def in_process_dreamer(store: Store, settings: Settings) -> Dreamer:
    """What `secretary serve` gives its API: run the dream requests in this process, through a
    dispatcher of its own, while no daemon runs on the store."""
    dispatcher = Dispatcher(RunnerCalls(store), settings=settings)
    schedule = settings.schedule
    return Dreamer(
        jobs=JOB_NAMES,
        run=dispatcher.dream,
        stop=dispatcher.stop,
        poll_seconds=schedule.poll_seconds,
        lease_seconds=schedule.lease_seconds,
        stop_timeout_seconds=schedule.stop_timeout_seconds,
    )
