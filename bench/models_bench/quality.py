"""Quality of one model on one set: dense-only R@10, the search with its vectors, and a
re-rank of the default search's top 30 blended with the default order.

- ``dense``: the cosine of the query vector with every memory's vector of the namespace
  (numpy, exact), the query vector made as the search makes it (``query_shape`` and
  ``query_vector``: a chat read as its whole and its focus, mixed) but with this model.
- ``dense_raw``: the same with the query embedded as given.
- ``search``: the default search (``store.search.searcher.rank`` over the evidence
  bench/locomo_bench's `Materials` gathers) with the dense hits replaced by this model's
  ``dense_candidates`` nearest: the product as it would rank with this embedder. For the
  product's own model it is the default search.
- ``rerank`` at weight w: the default search's top 30 reordered by
  ``(1 - w) / (60 + default rank) + w / (60 + this model's rank)`` (ranks 1-30 within the
  30, this model's by cosine with the query vector as in ``dense``); w = 0 is the default
  search, w = 1 the model's order alone. Memories the default search does not return stay out.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from locomo_bench.data import Conversation, Question
from locomo_bench.metrics import K, QuestionScore, score_question

from models_bench.candidates import Encoder, Matrix
from models_bench.sets import ScoredSet
from store.requests import SearchRequest
from store.search.query_shape import query_vector
from store.search.searcher import query_shape, rank
from store.settings import RetrievalSettings
from store.vector.index import VectorHit

TOP = 30
RRF = 60
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))

Scores = dict[str, list[QuestionScore]]  # run -> one score per asked question


class Cache:
    """One model's embeddings of documents and queries, kept on disk between runs."""

    def __init__(self, path: Path, encoder: Callable[[], Encoder]) -> None:
        self.path = path
        self._make = encoder
        self._encoder: Encoder | None = None
        self.vectors: dict[tuple[str, str], Matrix] = {}
        if path.exists():
            self.vectors = pickle.loads(path.read_bytes())
        self._dirty = False

    def fill(self, side: str, texts: Sequence[str]) -> None:
        todo = sorted({t for t in texts if (side, t) not in self.vectors})
        if not todo:
            return
        if self._encoder is None:
            self._encoder = self._make()
        for start in range(0, len(todo), 256):
            chunk = todo[start : start + 256]
            encode = self._encoder.docs if side == "d" else self._encoder.queries
            for text, vector in zip(chunk, encode(chunk), strict=True):
                self.vectors[(side, text)] = vector
        self._dirty = True

    def get(self, side: str, text: str) -> Matrix:
        return self.vectors[(side, text)]

    def save(self) -> None:
        if self._dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(pickle.dumps(self.vectors))
            self._dirty = False


def default_top(
    scored: ScoredSet, defaults: RetrievalSettings
) -> list[tuple[Conversation, Question, list[int]]]:
    """The default search's top 30 memory ids of every asked question."""
    found = []
    for conv, question in scored.asked():
        evidence = scored.materials.evidence(conv, question.text, defaults)
        request = SearchRequest(
            namespace=conv.namespace, query=question.text, k=TOP, reinforce=False
        )
        snap = scored.materials.snapshots[conv.namespace]
        hits = rank(evidence, snap, request, defaults, now=conv.now)
        found.append((conv, question, [hit.memory_id for hit in hits]))
    return found


def score_set(
    scored: ScoredSet,
    cache: Cache,
    defaults: RetrievalSettings,
    tops: list[tuple[Conversation, Question, list[int]]],
) -> Scores:
    snaps = scored.materials.snapshots
    asked = scored.asked()
    shapes = {q.qid: query_shape(q.text, defaults) for _, q in asked}
    cache.fill(
        "d", [text for c in scored.conversations for text in snaps[c.namespace].content.values()]
    )
    cache.fill("q", [q.text for _, q in asked] + [t for s in shapes.values() for t, _ in s.dense])
    matrices: dict[str, tuple[list[int], Matrix]] = {}
    for conv in scored.conversations:
        ids = sorted(snaps[conv.namespace].content)
        rows = [cache.get("d", snaps[conv.namespace].content[i]) for i in ids]
        matrices[conv.namespace] = (
            ids,
            np.vstack(rows) if rows else np.zeros((0, 384), np.float32),
        )
    runs: Scores = {"dense": [], "dense_raw": [], "search": []}
    runs.update({f"rerank_w{w}": [] for w in WEIGHTS})
    for conv, question, top in tops:
        snap = snaps[conv.namespace]
        ids, matrix = matrices[conv.namespace]
        vector = query_vector(shapes[question.qid], lambda t: cache.get("q", t))
        sims = matrix @ vector
        order = np.argsort(-sims, kind="stable")
        runs["dense"].append(_score(question, snap.external_ids(ids[i] for i in order[:K])))
        raw = np.argsort(-(matrix @ cache.get("q", question.text)), kind="stable")
        runs["dense_raw"].append(_score(question, snap.external_ids(ids[i] for i in raw[:K])))
        hits = [
            VectorHit(memory_id=ids[i], similarity=float(sims[i]))
            for i in order[: defaults.dense_candidates]
        ]
        evidence = replace(scored.materials.evidence(conv, question.text, defaults), hits=hits)
        request = SearchRequest(namespace=conv.namespace, query=question.text, k=K, reinforce=False)
        ranked = [hit.memory_id for hit in rank(evidence, snap, request, defaults, now=conv.now)]
        runs["search"].append(_score(question, snap.external_ids(ranked)))
        position = {memory_id: i for i, memory_id in enumerate(ids)}
        own = sorted(top, key=lambda m: -float(sims[position[m]]))
        own_rank = {m: r for r, m in enumerate(own)}
        for w in WEIGHTS:
            fused = sorted(
                top,
                key=lambda m: -((1 - w) / (RRF + 1 + top.index(m)) + w / (RRF + 1 + own_rank[m])),
            )
            runs[f"rerank_w{w}"].append(_score(question, snap.external_ids(fused[:K])))
    cache.save()
    return runs


def defaults_run(
    tops: list[tuple[Conversation, Question, list[int]]], scored: ScoredSet
) -> list[QuestionScore]:
    snaps = scored.materials.snapshots
    return [_score(q, snaps[c.namespace].external_ids(top[:K])) for c, q, top in tops]


def _score(question: Question, ranked: list[str]) -> QuestionScore:
    return score_question(question, ranked)
