"""What every part of the latency benchmark shares: the namespace, the clock, timing helpers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import corpus
import numpy as np
from benchkit import WORK as BENCH_WORK
from benchkit import say

from store.requests import SearchRequest

NAMESPACE = "bench"
NOW = corpus.START + timedelta(days=corpus.SPAN_DAYS + 1)  # the clock of every write and search
BATCH = 1000  # memories per add_memories call (the default ingest.max_batch)
# Warm-up searches use questions of their own: the store remembers the embeddings of its recent
# texts (store.vector.recent), so a measured question that was also a warm-up one would skip its
# query embedding.
WARMUP = 20
BREAKDOWN_QUERIES = 50
BARE_N_RESULTS = 10
WORK = BENCH_WORK / "latency"
MIB = 1024 * 1024


def percentiles(samples: Sequence[float]) -> dict[str, float | int]:
    """Given durations in seconds, return count and p50/p95/p99/mean/max in milliseconds."""
    ms = np.asarray(samples, dtype=np.float64) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {
        "n": len(ms),
        "p50_ms": round(float(p50), 2),
        "p95_ms": round(float(p95), 2),
        "p99_ms": round(float(p99), 2),
        "mean_ms": round(float(ms.mean()), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def bounded(items: Sequence[Any], budget: float) -> Iterator[Any]:
    """Yield items until they run out or ``budget`` seconds have passed."""
    deadline = time.monotonic() + budget
    for item in items:
        if time.monotonic() > deadline:
            say(f"time budget of {budget:.0f} s reached; stopping this loop early")
            return
        yield item


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def request(query: str) -> SearchRequest:
    return SearchRequest(namespace=NAMESPACE, query=query, k=10, reinforce=False)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def dir_mib(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
    return round(total / MIB, 1)
