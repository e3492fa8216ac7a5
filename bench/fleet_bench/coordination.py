"""What the night's bookkeeping costs as the namespaces grow, apart from any model or job: a
dream request's firing of N units opened, units claimed (16 others running) and finished with
six outcomes each, the progress read a waiting opener polls, and the request's outcomes the
opener rewrites each time units end, read from every unit (``store.coordination``: the
``Firings`` and ``DreamRequests`` of ``store.db``). Run on an empty store of its own."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import update

from fleet_bench import prepare
from fleet_bench.content import namespace
from secretary.jobs.registry import JOB_NAMES
from store.models import FiringUnit
from store.service import Store

HOLDER = "bench-host:1:coordination"
RUNNING = 16  # units held by others while claims are timed (the rule: one per namespace)
SAMPLES = 200


def outcome(job: str, ns: str, number: int) -> dict[str, Any]:
    """An outcome the size a run's is (as ``secretary.dispatch.outcome_json`` shapes it)."""
    return {
        "job": job,
        "namespace": ns,
        "status": "applied",
        "record_id": 1000 + number,
        "records": [1000 + number],
        "message": "20 changes applied (21 operations); 1 LLM call, 2912 tokens",
    }


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
    }


def measure(units: int, work: Path) -> dict[str, Any]:
    """Time the bookkeeping of one firing of ``units`` namespaces."""
    database = f"fleet_coordination_{units}"
    prepare.admin(f'DROP DATABASE IF EXISTS "{database}"')
    prepare.admin(f'CREATE DATABASE "{database}"')
    store = Store.open(prepare.store_settings(work / "coordination", database, ""), create=True)
    now = datetime.now(UTC)
    ttl = timedelta(minutes=10)
    try:
        db = store.db
        request = db.dream_requests.enqueue(
            namespace=None, jobs=[], retry_quarantined=False, requested_by="bench", now=now
        )
        claimed = db.dream_requests.claim(picker=HOLDER, now=now)
        assert claimed is not None
        assert claimed.id == request
        started = time.perf_counter()
        firing, _ = db.firings.open(
            f"dream:{request}",
            jobs=JOB_NAMES,
            namespaces=[namespace(n) for n in range(units)],
            opened_by=HOLDER,
            now=now,
            manual=True,
        )
        opened = time.perf_counter() - started
        for _ in range(RUNNING):
            db.firings.claim(holder="other:2:x", now=now, ttl=ttl)
        claims, finishes, polls = [], [], []
        for _ in range(SAMPLES):
            started = time.perf_counter()
            unit = db.firings.claim(holder=HOLDER, now=now, ttl=ttl)
            claims.append(time.perf_counter() - started)
            assert unit is not None
            done = [outcome(job, unit.namespace, unit.id) for job in JOB_NAMES]
            started = time.perf_counter()
            db.firings.finish(unit.id, holder=HOLDER, outcomes=done, now=now)
            finishes.append(time.perf_counter() - started)
            started = time.perf_counter()
            db.firings.progress(firing, now=now)
            polls.append(time.perf_counter() - started)
        # The end of the night: every unit done with its outcomes, as the opener reads them.
        with store.engine.begin() as connection:
            for number in range(units):
                ns = namespace(number)
                connection.execute(
                    update(FiringUnit)
                    .where(FiringUnit.firing_id == firing.id, FiringUnit.namespace == ns)
                    .values(state="done", outcomes=[outcome(j, ns, number) for j in JOB_NAMES])
                )
        started = time.perf_counter()
        outcomes = db.firings.outcomes(firing.id)
        read = time.perf_counter() - started
        started = time.perf_counter()
        db.dream_requests.progress(request, picker=HOLDER, outcomes=outcomes)
        written = time.perf_counter() - started
        return {
            "units": units,
            "open_firing_seconds": round(opened, 2),
            "claim_ms": _ms(claims),
            "finish_ms": _ms(finishes),
            "progress_poll_ms": _ms(polls),
            "all_outcomes": len(outcomes),
            "outcomes_read_seconds": round(read, 2),
            "request_progress_write_seconds": round(written, 2),
        }
    finally:
        store.close()
        prepare.drop(database)
