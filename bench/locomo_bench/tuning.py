"""Two-fold tuning: coordinate search of the weights on one half, scored on the other."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from locomo_bench.data import Conversation
from locomo_bench.metrics import both_views, recall10
from locomo_bench.prepared import Bench
from locomo_bench.rankers import (
    Ranker,
    bm25_ranker,
    dense_ranker,
    rrf_ranker,
    run_ranker,
    settings_ranker,
)
from store.settings import RetrievalSettings

FOLDS = (("A", range(0, 5)), ("B", range(5, 10)))  # conversations 0-4 and 5-9

# Coordinate search from the defaults, in this order, one round; a value replaces the current
# one only if it scores higher. The weights of relevance (with the BM25 part's exponent) and of
# spreading, and the settings of the timeline and chat rules: the candidate pools, spread_depth
# and spread_seeds moved R@10 by less than 0.3 in earlier searches (2026-11-26: depth 2 gained
# 0.1-0.3 per view for one more hop of reads per search).
GRID: dict[str, tuple[float | int, ...]] = {
    "w_lexical": (1.0, 1.5, 2.0),
    "lexical_exponent": (1.0, 1.5, 2.0),
    "w_dense": (0.5, 1.0, 1.5),
    "w_session": (0.25, 0.5, 0.75, 1.0),
    "w_act": (0.2, 0.4, 0.6),
    "timeline_window_minutes": (0.0, 60.0, 1440.0),
    "chat_focus_lexical": (0.5, 0.75, 0.9),
    "chat_focus_dense": (0.5, 0.7, 0.9),
}
TUNING_ROUNDS = 1


def half(bench: Bench, members: range) -> list[Conversation]:
    return [c for c in bench.conversations if c.index in members]


def objective(benches: Sequence[Bench], settings: RetrievalSettings, members: range) -> float:
    """Mean recall@10 over the views of the conversations in ``members``."""
    ranker = settings_ranker(settings)
    return statistics.fmean(
        recall10(run_ranker(bench, ranker, half(bench, members))) for bench in benches
    )


def tune(
    benches: Sequence[Bench], start: RetrievalSettings, members: range
) -> tuple[RetrievalSettings, float]:
    """Coordinate search of GRID on the ``members`` conversations of every view given; return
    the best settings and their mean recall@10."""
    best = start
    best_score = objective(benches, best, members)
    for _ in range(TUNING_ROUNDS):
        for name, values in GRID.items():
            for value in values:
                if getattr(best, name) == value:
                    continue
                trial = best.model_copy(update={name: value})
                score = objective(benches, trial, members)
                if score > best_score + 1e-9:
                    best, best_score = trial, score
    return best, best_score


def tuned_fields(settings: RetrievalSettings) -> dict[str, float | int]:
    return {name: getattr(settings, name) for name in GRID}


def run_folds(benches: Sequence[Bench], defaults: RetrievalSettings) -> list[dict[str, Any]]:
    """Tune on one half of the conversations, over the tuned views together, and score every
    view (the untuned ones too) on the other half; both ways round."""
    tuned_views = [bench for bench in benches if bench.tuned]
    results = []
    for (train, train_members), (test, test_members) in (FOLDS, FOLDS[::-1]):
        started = time.perf_counter()
        tuned, train_score = tune(tuned_views, defaults, train_members)
        rankers: dict[str, Ranker] = {
            "tuned": settings_ranker(tuned),
            "defaults": settings_ranker(defaults),
            "bm25": bm25_ranker,
            "dense": dense_ranker,
            "rrf": rrf_ranker,
        }
        results.append(
            {
                "train": f"conversations {_span(train_members)}",
                "test": f"conversations {_span(test_members)}",
                "tuned_on": [bench.name for bench in tuned_views],
                "tuned": tuned_fields(tuned),
                "train_r10": round(100 * train_score, 1),
                "scores": {
                    bench.name: {
                        name: both_views(run_ranker(bench, ranker, half(bench, test_members)))
                        for name, ranker in rankers.items()
                    }
                    for bench in benches
                },
            }
        )
        print(
            f"fold {train}->{test} tuned in {time.perf_counter() - started:.0f} s: "
            f"{tuned_fields(tuned)}",
            file=sys.stderr,
        )
    return results


def _span(members: range) -> str:
    return f"{members[0]}-{members[-1]}"


def half_mean(row: Mapping[str, float], fold: str, views: Sequence[str]) -> float:
    """Mean of ``row`` ("view:fold" -> R@10) over ``views`` on one fold's half."""
    return statistics.fmean(row[f"{view}:{fold}"] for view in views)


def choose_on_folds(
    scores: Mapping[str, Mapping[str, float]], views: Sequence[str]
) -> list[dict[str, Any]]:
    """For each fold, the candidate of ``scores`` best on its half over ``views`` (ties: the
    larger key), and its mean over ``views`` on the other half."""
    names = [fold for fold, _ in FOLDS]
    chosen = []
    for tuned_on, scored_on in (names, names[::-1]):
        best = max(scores, key=lambda c: (half_mean(scores[c], tuned_on, views), c))
        score = round(half_mean(scores[best], scored_on, views), 2)
        chosen.append(
            {"tuned_on": tuned_on, "scored_on": scored_on, "chosen": best, "chosen_score": score}
        )
    return chosen
