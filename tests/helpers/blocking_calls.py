"""Fake jobs for the dispatcher and the daemon: each run signals that it started, then waits
until the test releases it; overlaps on a namespace and the most runs at once are counted."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from secretary.config import Settings
from secretary.outcomes import RunOutcome, make_outcome
from store.coordination.dream_requests import DreamRequestView
from store.errors import SecretaryError

WAIT = 10.0  # seconds: the bound on every wait for another thread


class BlockingCalls:
    def __init__(self, namespaces: Sequence[str], fail: Sequence[str] = ()) -> None:
        self._namespaces = list(namespaces)
        self._fail = set(fail)
        self._lock = threading.Lock()
        self.entered: defaultdict[tuple[str, str], threading.Event] = defaultdict(threading.Event)
        self.release: defaultdict[tuple[str, str], threading.Event] = defaultdict(threading.Event)
        self.log: list[tuple[str, str, str]] = []
        self.active: defaultdict[str, int] = defaultdict(int)
        self.at_once = 0
        self.most_at_once = 0
        self.overlaps: list[str] = []
        self.retried: list[bool] = []
        self.manual: list[bool] = []
        self.progressed: list[int] = []

    def namespaces(self, job: str) -> Sequence[str]:
        return self._namespaces

    def release_all(self, jobs: Sequence[str]) -> None:
        for job in jobs:
            for namespace in self._namespaces:
                self.release[job, namespace].set()

    def progress(self, request: DreamRequestView, outcomes: Sequence[Mapping[str, Any]]) -> None:
        self.progressed.append(len(outcomes))

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
        with self._lock:
            self.log.append(("start", job, namespace))
            self.retried.append(retry_quarantined)
            self.manual.append(manual)
            self.active[namespace] += 1
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
            if self.active[namespace] > 1:
                self.overlaps.append(namespace)
        self.entered[job, namespace].set()
        try:
            if namespace in self._fail:
                raise SecretaryError(f"{job} broke on {namespace}")
            assert self.release[job, namespace].wait(WAIT), f"{job} on {namespace} never released"
            return make_outcome(job, namespace, "applied", "applied", record_id=len(self.log))
        finally:
            with self._lock:
                self.active[namespace] -= 1
                self.at_once -= 1
                self.log.append(("end", job, namespace))

    def ran(self, job: str) -> list[str]:
        """The namespaces ``job`` started on, in order."""
        with self._lock:
            return [ns for event, name, ns in self.log if event == "start" and name == job]
