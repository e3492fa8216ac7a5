"""One benchmark run: every ranking scored, ablations, optional folds, as the report's dict."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from benchkit import git

from locomo_bench.metrics import both_views, recall10
from locomo_bench.prepared import Bench
from locomo_bench.rankers import (
    bm25_ranker,
    dense_ranker,
    last_line,
    rrf_ranker,
    run_ablations,
    run_end_to_end,
    run_ranker,
    settings_ranker,
)
from locomo_bench.tuning import run_folds
from store.settings import RetrievalSettings


def build_report(benches: Sequence[Bench], *, tune_folds: bool) -> dict[str, Any]:
    """Score every view; with ``tune_folds``, tune on one half of the conversations over the
    tuned views together and score every view's other half, both ways round."""
    defaults = RetrievalSettings()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "machine": machine(),
        "settings": defaults.model_dump(),
        "views": {bench.name: view_report(bench, defaults) for bench in benches},
    }
    if tune_folds:
        report["folds"] = run_folds(benches, defaults)
    return report


def view_report(bench: Bench, defaults: RetrievalSettings) -> dict[str, Any]:
    """One view: defaults end to end (decay on and off), the baselines, ablations."""
    started = time.perf_counter()
    decay_off = defaults.model_copy(update={"half_life_days": 0.0})
    default_scores, latencies = run_end_to_end(bench, defaults)
    decay_scores, _ = run_end_to_end(bench, decay_off)
    convs = bench.conversations
    runs = {
        "defaults": both_views(default_scores),
        "decay_off": both_views(decay_scores),
        "bm25": both_views(run_ranker(bench, bm25_ranker, convs)),
        "dense": both_views(run_ranker(bench, dense_ranker, convs)),
        "rrf": both_views(run_ranker(bench, rrf_ranker, convs)),
        "dense_search": both_views(run_ranker(bench, settings_ranker(dense_only(defaults)), convs)),
    }
    if any("\n" in q.text for c in convs for q in c.questions):  # chat queries
        for name, ranker in (("bm25", bm25_ranker), ("dense", dense_ranker), ("rrf", rrf_ranker)):
            runs[f"{name}_last_line"] = both_views(run_ranker(bench, last_line(ranker), convs))
    cached = recall10(run_ranker(bench, settings_ranker(defaults), convs))
    questions = [q for c in convs for q in c.questions if q.evidence]
    report: dict[str, Any] = {
        "data": {
            "namespaces": len(convs),
            "memories": sum(len(c.turns) for c in convs),
            "questions": len(questions),
            "flagged": sum(q.flagged for q in questions),
        },
        "tuned_on": bench.tuned,
        "runs": runs,
        "decay_delta_r10": round(
            runs["defaults"]["all"]["overall"]["r10"] - runs["decay_off"]["all"]["overall"]["r10"],
            1,
        ),
        "cached_rerank_r10_of_defaults": round(100 * cached, 1),
        "latency_ms": {
            "p50": 1000 * statistics.median(latencies),
            "p95": 1000 * sorted(latencies)[int(0.95 * (len(latencies) - 1))],
        },
        "ablations_r10": run_ablations(bench, defaults),
    }
    print(f"view {bench.name} scored in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    bench.materials.save()
    return report


def dense_only(settings: RetrievalSettings) -> RetrievalSettings:
    """The search ranking by its dense part alone: the query shaped as the search shapes it
    (a chat excerpt's latest turn weighted); no BM25, session, period, spreading, importance
    or recency."""
    off = ("w_lexical", "w_session", "w_period", "w_act", "w_imp", "w_rec")
    return settings.model_copy(update=dict.fromkeys(off, 0.0))


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
