"""A dream cycle: the jobs, in order, over the namespaces, as `secretary dream` runs them.

A cycle's jobs build on each other (the soul mapper reads what the auditor kept), so a cycle
started beside another one on the same namespace does not skip the job the other is running:
it waits for that run to end and then runs the job itself, finding what the other left to do
(usually nothing). Two cycles started together thus do the work of one, in the same order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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
    makes no LLM call). A job another process is running on the namespace is waited for, then
    run (see `_run_in_turn`). ``manual`` runs jobs that back off after failed runs (see
    ``run_job``); ``watch`` is told of each run as it starts and ends.
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

    targets = list(namespaces or store.db.work.namespaces_with_work())
    total = len(targets) * len(names)
    for namespace in targets:
        for name in names:
            if watch is not None:
                watch.starting(name, namespace, done=len(outcomes), total=total)
            outcome = _run_in_turn(
                partial(run, name, namespace),
                patience=settings.jobs.run_lock_seconds,
                sleep=sleep,
                monotonic=monotonic,
            )
            logger.info("{} on {}: {} {}", name, namespace, outcome.status, outcome.message)
            outcomes.append(outcome)
            if watch is not None:
                watch.finished(outcome)
    return outcomes


class CycleWatch(Protocol):
    """Told of a cycle's runs as they go (`secretary dream` prints each outcome at once)."""

    def starting(self, job: str, namespace: str, *, done: int, total: int) -> None: ...

    def finished(self, outcome: RunOutcome) -> None: ...


# How often a cycle looks again whether another process's run of a job has ended.
BUSY_POLL_SECONDS = 0.5


def _run_in_turn(
    run: Callable[[], RunOutcome],
    *,
    patience: float,
    sleep: Callable[[float], None],
    monotonic: Monotonic,
) -> RunOutcome:
    """Run a job of a cycle; while another process runs it on the namespace, wait for that run
    to end (at most ``patience`` seconds, the lease's life) and then run it.

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
