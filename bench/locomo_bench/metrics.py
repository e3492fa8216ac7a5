"""Scores of one question (recall@5/@10, NDCG@10) and their summaries by category."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from locomo_bench.data import CATEGORIES, Question

K = 10


@dataclass(frozen=True)
class QuestionScore:
    category: int
    flagged: bool
    r5: float
    r10: float
    ndcg10: float


def score_question(question: Question, ranked: Sequence[str]) -> QuestionScore:
    wanted = set(question.evidence)
    gains = [1.0 if dia_id in wanted else 0.0 for dia_id in ranked[:K]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(wanted), K)))
    return QuestionScore(
        category=question.category,
        flagged=question.flagged,
        r5=len(wanted & set(ranked[:5])) / len(wanted),
        r10=len(wanted & set(ranked[:K])) / len(wanted),
        ndcg10=dcg / ideal,
    )


def summarise(scores: Sequence[QuestionScore]) -> dict[str, dict[str, float]]:
    """Return group -> {r5, r10, ndcg10, n} in percent, per category and overall."""
    groups: dict[str, list[QuestionScore]] = {"overall": list(scores)}
    groups["overall w/o adversarial"] = [s for s in scores if s.category != 5]
    for category, name in CATEGORIES.items():
        groups[f"{category} {name}"] = [s for s in scores if s.category == category]
    return {name: _means(members) for name, members in groups.items()}


def _means(scores: Sequence[QuestionScore]) -> dict[str, float]:
    if not scores:
        return {"r5": 0.0, "r10": 0.0, "ndcg10": 0.0, "n": 0}
    return {
        "r5": round(100 * statistics.fmean(s.r5 for s in scores), 1),
        "r10": round(100 * statistics.fmean(s.r10 for s in scores), 1),
        "ndcg10": round(100 * statistics.fmean(s.ndcg10 for s in scores), 1),
        "n": len(scores),
    }


def both_views(scores: Sequence[QuestionScore]) -> dict[str, Any]:
    """Summaries over all questions and over those the audit did not flag."""
    return {"all": summarise(scores), "unflagged": summarise([s for s in scores if not s.flagged])}


def recall10(scores: Sequence[QuestionScore]) -> float:
    return statistics.fmean(s.r10 for s in scores) if scores else 0.0
