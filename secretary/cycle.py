"""A dream cycle: the jobs, in order, over the namespaces, as `secretary dream` runs them.

A cycle's jobs build on each other (the soul mapper reads what the auditor kept), so a cycle
started beside another one on the same namespace does not skip the job the other is running:
it waits for that run to end and then runs the job itself, finding what the other left to do
(usually nothing). Two cycles started together thus do the work of one, in the same order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

from loguru import logger

from secretary.config import Settings
from secretary.jobs.registry import JOBS, get_job
from secretary.llm.client import LlmClient
from secretary.outcomes import RunOutcome
from secretary.runner import Monotonic, run_job
from store.service import Store


def run_cycle(
    store: Store,
    settings: Settings,
    *,
    now: datetime,
    namespaces: Sequence[str] | None = None,
    jobs: Sequence[str] | None = None,
    dry_run: bool = False,
    retry_quarantined: bool = False,
    llm: LlmClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Monotonic = time.monotonic,
    manual: bool = False,
    watch: CycleWatch | None = None,
) -> list[RunOutcome]:
    """Run the jobs (default: all, in order) on the namespaces (default: those with work).

    Every job is incremental, so running one on a namespace with nothing new is cheap (and
    makes no LLM call). Up to ``[jobs] concurrency`` namespaces run at once, each its jobs in
    order; the namespaces the longest waiting go first. A job another process is running on
    the namespace is waited for, then run (see `_run_in_turn`). ``manual`` runs jobs that back
    off after failed runs (see ``run_job``); ``watch`` is told of each run as it starts and
    ends.
    """
    names = list(jobs) if jobs else list(JOBS)
    for name in names:
        get_job(name)  # an unknown name fails before anything runs
    outcomes: list[RunOutcome] = []
    started = monotonic()

    def run(name: str, namespace: str) -> RunOutcome:
        # A run starts when it starts, not when the cycle did (after waiting its turn, too):
        # the records of one night tell their runs apart in time.
        at = now + timedelta(seconds=max(0.0, monotonic() - started))
        return run_job(
            store,
            settings,
            name,
            namespace,
            now=at,
            dry_run=dry_run,
            retry_quarantined=retry_quarantined,
            llm=llm,
            manual=manual,
        )

    targets = list(namespaces or store.db.work.namespaces_waiting_longest(names[0]))
    total = len(targets) * len(names)
    told = threading.Lock()  # the watch hears one run at a time, and counts them right

    def run_namespace(namespace: str) -> list[RunOutcome]:
        done: list[RunOutcome] = []
        for name in names:
            if watch is not None:
                with told:
                    watch.starting(name, namespace, done=len(outcomes), total=total)
            outcome = _run_in_turn(
                partial(run, name, namespace),
                patience=OTHER_RUN_PATIENCE_SECONDS,
                sleep=sleep,
                monotonic=monotonic,
            )
            logger.info("{} on {}: {} {}", name, namespace, outcome.status, outcome.message)
            done.append(outcome)
            with told:
                outcomes.append(outcome)
                if watch is not None:
                    watch.finished(outcome)
        return done

    workers = min(settings.jobs.concurrency, len(targets))
    if workers <= 1:
        return [outcome for namespace in targets for outcome in run_namespace(namespace)]
    # Namespaces in parallel (their runs wait on the model, not the host), each one's jobs in
    # order; the outcomes come back namespace by namespace, as a sequential cycle gives them.
    with ThreadPoolExecutor(workers, thread_name_prefix="dream") as pool:
        per_namespace = list(pool.map(run_namespace, targets))
    return [outcome for done in per_namespace for outcome in done]


class CycleWatch(Protocol):
    """Told of a cycle's runs as they go (`secretary dream` prints each outcome at once)."""

    def starting(self, job: str, namespace: str, *, done: int, total: int) -> None: ...

    def finished(self, outcome: RunOutcome) -> None: ...


# How often a cycle looks again whether another process's run of a job has ended, and how long
# it waits for that run at most (the other run's lease is renewed while it lives).
BUSY_POLL_SECONDS = 0.5
OTHER_RUN_PATIENCE_SECONDS = 3600.0


def _run_in_turn(
    run: Callable[[], RunOutcome],
    *,
    patience: float,
    sleep: Callable[[float], None],
    monotonic: Monotonic,
) -> RunOutcome:
    """Run a job of a cycle; while another process runs it on the namespace, wait for that run
    to end (at most ``patience`` seconds) and then run it.

    A cycle's jobs build on each other (the soul mapper reads what the auditor kept), so a
    second cycle started beside the first must not skip ahead: it follows the first job by job,
    each of its runs finding what the other's left to do (usually nothing).
    """
    outcome = run()
    deadline = monotonic() + patience
    if outcome.busy:
        logger.info("{} on {}: waiting for the run in progress", outcome.job, outcome.namespace)
    while outcome.busy and monotonic() < deadline:
        sleep(BUSY_POLL_SECONDS)
        outcome = run()
    return outcome
