"""Rankings of a question: the service's own search, re-ranked evidence, and baselines.

Re-ranking uses the same ``store.search.searcher.rank`` the service uses, over a snapshot, with the
evidence `Materials` computes as ``Searcher.evidence`` would. The baselines read the query
as given (no shaping): BM25 alone (the store's index), dense alone (the cosine of the whole
query's embedding with each memory's), and their reciprocal-rank fusion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from locomo_bench.data import Conversation, Question
from locomo_bench.metrics import K, QuestionScore, recall10, score_question
from locomo_bench.prepared import Bench, Materials
from store.requests import SearchRequest
from store.search.searcher import Searcher, rank
from store.settings import RetrievalSettings

RRF_K = 60

Ranker = Callable[[Conversation, Question, Materials], list[int]]


def settings_ranker(settings: RetrievalSettings) -> Ranker:
    def ranked(conv: Conversation, question: Question, materials: Materials) -> list[int]:
        request = SearchRequest(namespace=conv.namespace, query=question.text, k=K, reinforce=False)
        evidence = materials.evidence(conv, question.text, settings)
        snap = materials.snapshots[conv.namespace]
        return [hit.memory_id for hit in rank(evidence, snap, request, settings, now=conv.now)]

    return ranked


def _bm25_order(conv: Conversation, question: Question, materials: Materials) -> list[int]:
    return list(materials.lexical(conv.namespace, question.text, 1000))


def _dense_order(conv: Conversation, question: Question, materials: Materials) -> list[int]:
    hits = materials.dense(conv.namespace, ((question.text, 1.0),), 600)
    return [hit.memory_id for hit in hits]


def bm25_ranker(conv: Conversation, question: Question, materials: Materials) -> list[int]:
    return _bm25_order(conv, question, materials)[:K]


def dense_ranker(conv: Conversation, question: Question, materials: Materials) -> list[int]:
    return _dense_order(conv, question, materials)[:K]


def rrf_ranker(conv: Conversation, question: Question, materials: Materials) -> list[int]:
    fused: dict[int, float] = {}
    for order in (_bm25_order(conv, question, materials), _dense_order(conv, question, materials)):
        for position, memory_id in enumerate(order):
            fused[memory_id] = fused.get(memory_id, 0.0) + 1.0 / (RRF_K + position + 1)
    return sorted(fused, key=lambda m: (-fused[m], m))[:K]


def _last_line(question: Question) -> Question:
    """The question as its chat's latest line alone (a one-line question stays as it is)."""
    return replace(question, text=question.text.strip().splitlines()[-1])


def last_line(ranker: Ranker) -> Ranker:
    """A baseline that reads only the latest line of a chat query: what a caller that knows
    the question is the last line would send."""

    def ranked(conv: Conversation, question: Question, materials: Materials) -> list[int]:
        return ranker(conv, _last_line(question), materials)

    return ranked


BASELINES: dict[str, Ranker] = {"bm25": bm25_ranker, "dense": dense_ranker, "rrf": rrf_ranker}

# Each ingredient of the default ranking removed, or set otherwise, one at a time (re-ranking,
# all data).
ABLATIONS: dict[str, dict[str, float | int]] = {
    "no dense (w_dense = 0)": {"w_dense": 0.0},
    "BM25 part as divided by the best, weight 1 (lexical_exponent = w_lexical = 1)": {
        "lexical_exponent": 1.0,
        "w_lexical": 1.0,
    },
    "BM25 without the memory before (lexical_context = 0)": {"lexical_context": 0.0},
    "no session score (w_session = 0)": {"w_session": 0.0},
    "no period bonus (w_period = 0)": {"w_period": 0.0},
    "no spreading (w_act = 0)": {"w_act": 0.0},
    "timeline spreads across sessions and any gap (window = 1e9 min)": {
        "timeline_window_minutes": 1e9,
    },
    "no chat focus in BM25 (chat_focus_lexical = 0.5)": {"chat_focus_lexical": 0.5},
    "no chat focus in the vector (chat_focus_dense = 0)": {"chat_focus_dense": 0.0},
    "the folds' chat focus in the vector (chat_focus_dense = 0.9)": {"chat_focus_dense": 0.9},
    "the focus alone embedded (chat_focus_dense = 1)": {"chat_focus_dense": 1.0},
    "no importance or recency (w_imp = w_rec = 0)": {"w_imp": 0.0, "w_rec": 0.0},
    "importance decay off (half_life_days = 0)": {"half_life_days": 0.0},
}


def run_ablations(bench: Bench, defaults: RetrievalSettings) -> dict[str, float]:
    """Return overall recall@10 of the defaults and of each ablation, in percent."""
    convs = bench.conversations
    rankers: dict[str, Ranker] = {"defaults (re-ranking)": settings_ranker(defaults)}
    for name, update in ABLATIONS.items():
        rankers[name] = settings_ranker(defaults.model_copy(update=update))
    return {
        name: round(100 * recall10(run_ranker(bench, ranker, convs)), 1)
        for name, ranker in rankers.items()
    }


def run_ranker(bench: Bench, ranker: Ranker, convs: Iterable[Conversation]) -> list[QuestionScore]:
    scores = []
    for conv in convs:
        snap = bench.snapshots[conv.namespace]
        for question in conv.questions:
            if not question.evidence:
                continue
            ranked = snap.external_ids(ranker(conv, question, bench.materials))
            scores.append(score_question(question, ranked))
    return scores


def run_end_to_end(
    bench: Bench, settings: RetrievalSettings
) -> tuple[list[QuestionScore], list[float]]:
    """Search through `Searcher.search` itself; return the scores and per-query latencies."""
    store = bench.store
    searcher = Searcher(
        reads=store.db.search,
        memories=store.db.memories,
        index=lambda: store.index,
        lexical=store.lexical,
        settings=settings,
    )
    scores, latencies = [], []
    try:
        for conv in bench.conversations:
            for question in conv.questions:
                if not question.evidence:
                    continue
                request = SearchRequest(
                    namespace=conv.namespace, query=question.text, k=K, reinforce=False
                )
                started = time.perf_counter()
                result = searcher.search(request, now=conv.now)
                latencies.append(time.perf_counter() - started)
                if result.degraded:
                    raise SystemExit(f"search degraded: {result.degraded}")
                ranked = [str(hit.memory.external_id) for hit in result.hits]
                scores.append(score_question(question, ranked))
    finally:
        searcher.close()
    return scores, latencies
