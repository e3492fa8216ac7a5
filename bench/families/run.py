"""One family scored: the defaults end to end and the baselines, on both halves, as a dict.

Everything ranks the same store and the same questions with ``bench/locomo_bench``'s code:
``run_end_to_end`` (``Searcher.search`` itself, reinforce=False) for the defaults,
``run_ranker`` with its BM25, dense and RRF baselines, and ``settings_ranker`` (the service's
``rank`` over the evidence the search would gather) for the search's own dense-only and
lexical-only rankings.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from locomo_bench.data import Conversation, Question
from locomo_bench.metrics import QuestionScore, summarise
from locomo_bench.prepared import Bench
from locomo_bench.rankers import (
    Ranker,
    bm25_ranker,
    dense_ranker,
    last_line,
    rrf_ranker,
    run_ablations,
    run_end_to_end,
    run_ranker,
    settings_ranker,
)
from locomo_bench.run import dense_only

from families.items import LoadedFamily
from families.registry import Family
from families.split import REPORT, TUNE, halves, sample
from store.settings import RetrievalSettings

BASELINES = ("bm25", "dense", "rrf", "search_dense", "search_lexical")


def lexical_only(settings: RetrievalSettings) -> RetrievalSettings:
    """The search ranking by its BM25 part alone (the query shaped as the search shapes it,
    the memory before read too): no dense, session, period, spreading, importance or
    recency; the counterpart of ``locomo_bench.run.dense_only``."""
    off = ("w_dense", "w_session", "w_period", "w_act", "w_imp", "w_rec")
    return settings.model_copy(update=dict.fromkeys(off, 0.0))


def rankers(family: Family, defaults: RetrievalSettings) -> dict[str, Ranker]:
    """Every re-ranked run of a family, by name (the defaults run end to end apart)."""
    found: dict[str, Ranker] = {
        "bm25": bm25_ranker,
        "dense": dense_ranker,
        "rrf": rrf_ranker,
        "search_dense": settings_ranker(dense_only(defaults)),
        "search_lexical": settings_ranker(lexical_only(defaults)),
        # The defaults re-ranked over cached evidence, as tuning would score them: it must
        # match the end-to-end run, or tuning on this family would tune something else.
        "defaults_rerank": settings_ranker(defaults),
    }
    if family.chat:
        for name in ("bm25", "dense", "rrf"):
            found[f"{name}_last_line"] = last_line(found[name])
    return found


def subsample(loaded: LoadedFamily, n: int | None) -> LoadedFamily:
    """Keep ``n`` questions of the family, chosen by hash (all memories stay)."""
    if n is None:
        return loaded
    keep = sample(
        str(loaded.meta.get("family", "")),
        (q.qid for c in loaded.conversations for q in c.questions),
        n,
    )
    convs = [
        replace(c, questions=tuple(q for q in c.questions if q.qid in keep))
        for c in loaded.conversations
    ]
    return replace(loaded, conversations=convs)


def unit_of(family: Family, conv: Conversation, question: Question) -> str:
    return conv.namespace if family.split_by == "namespace" else question.qid


def split_family(family: Family, loaded: LoadedFamily) -> tuple[frozenset[str], frozenset[str]]:
    """The family's tune and report units, from all its questions (before any subsample,
    so that a subsample never moves a unit from one half to the other)."""
    return halves(
        family.name, (unit_of(family, c, q) for c in loaded.conversations for q in c.questions)
    )


def family_report(
    family: Family,
    loaded: LoadedFamily,
    split: tuple[frozenset[str], frozenset[str]],
    bench: Bench,
    defaults: RetrievalSettings,
) -> dict[str, Any]:
    """Score every run on the whole family and on each half of ``split`` (tune, report
    units); return the report's dict."""
    started = time.perf_counter()
    asked = [(c, q) for c in bench.conversations for q in c.questions if q.evidence]
    units = [unit_of(family, c, q) for c, q in asked]
    tune, report = split
    parts = [TUNE if unit in tune else REPORT for unit in units]
    types = [loaded.types[q.category] for _, q in asked]
    scores: dict[str, list[QuestionScore]] = {}
    scores["defaults"], latencies = run_end_to_end(bench, defaults)
    for name, ranker in rankers(family, defaults).items():
        scores[name] = run_ranker(bench, ranker, bench.conversations)
    counts = loaded.meta.get("counts", {})
    result = {
        "title": family.title,
        "shape": family.shape,
        "held_out": family.held_out,
        "chat_queries": family.chat,
        "source": {k: loaded.meta.get(k) for k in ("source_url", "source_commit", "licence")},
        "converted": loaded.meta.get("converted"),
        "items_sha256": loaded.meta.get("sha256"),
        "data": {
            "namespaces": len(bench.conversations),
            "memories": sum(len(c.turns) for c in bench.conversations),
            "sessions": counts.get("sessions"),
            "questions": len(asked),
            "questions_converted": counts.get("questions"),
        },
        "split": {
            "by": family.split_by,
            TUNE: {"units": len(tune), "questions": parts.count(TUNE)},
            REPORT: {"units": len(report), "questions": parts.count(REPORT)},
            "report_units": sorted(report) if family.split_by == "namespace" else None,
        },
        "latency_ms": {
            "p50": round(1000 * statistics.median(latencies), 1),
            "p95": round(1000 * sorted(latencies)[int(0.95 * (len(latencies) - 1))], 1),
        },
        "runs": {name: by_part(run, parts, types) for name, run in scores.items()},
        # A diagnostic over all questions (bench/locomo_bench's ablations): which part of the
        # ranking helps or hurts on this shape of data. Never a place to choose values from
        # a held-out family, nor from a report half.
        "ablations_r10": run_ablations(bench, defaults),
    }
    print(
        f"family {family.name} scored in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return result


def by_part(
    scores: Sequence[QuestionScore], parts: Sequence[str], types: Sequence[str]
) -> dict[str, Any]:
    """Means (percent) over all questions, each half, and per question type within each."""
    if len(scores) != len(parts):
        raise ValueError(f"{len(scores)} scores for {len(parts)} questions")
    found = {}
    for part in ("all", TUNE, REPORT):
        chosen = [i for i, p in enumerate(parts) if part in ("all", p)]
        found[part] = {
            **_mean(scores, chosen),
            "by_type": {
                kind: _mean(scores, [i for i in chosen if types[i] == kind])
                for kind in sorted(set(types))
            },
        }
    return found


def _mean(scores: Sequence[QuestionScore], chosen: Sequence[int]) -> Mapping[str, float]:
    return summarise([scores[i] for i in chosen])["overall"]
