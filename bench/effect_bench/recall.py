"""LoCoMo evidence recall of a store, as bench/locomo.py computes it, with hits mapped to turns.

Each question with evidence is one ``Searcher.search`` (default settings, k=10,
reinforce=False, now = a day after the conversation's last session). A hit counts for the
turns it *represents*: a turn itself; in a dreamed store also the turns it carries through
``replaced_by`` (a memory that took an evidence turn's place); in the lenient view also the
turns its pollutants copy. Recall@k is the share of a question's evidence turns that the top
k hits represent; NDCG@10 gives a hit gain 1 when it represents an evidence turn no earlier
hit did. With one turn per hit this is exactly bench/locomo.py's scoring.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from locomo_bench.data import Conversation, Question
from locomo_bench.metrics import K, QuestionScore, summarise

from effect_bench.metrics import Chains
from effect_bench.pollution import Truth
from store.requests import SearchRequest
from store.service import Store

Hits = dict[str, list[tuple[int, ...]]]  # namespace -> per question with evidence: hit ids
Represents = Mapping[int, set[str]]  # memory id -> the dia_ids it stands for


def asked(conv: Conversation) -> list[Question]:
    return [q for q in conv.questions if q.evidence]


def search_all(store: Store, conversations: Iterable[Conversation]) -> Hits:
    """Run every question with evidence; return the hit ids."""
    out: Hits = {}
    for conv in conversations:
        found = []
        for question in asked(conv):
            request = SearchRequest(
                namespace=conv.namespace, query=question.text, k=K, reinforce=False
            )
            result = store.searcher.search(request, now=conv.now)
            if result.degraded:
                raise SystemExit(f"search degraded: {result.degraded}")
            found.append(tuple(hit.memory.id for hit in result.hits))
        out[conv.namespace] = found
    return out


DEEP = 50  # how far down a memory's rank and score parts are looked for
PARTS = ("lexical", "dense", "session", "period", "activation", "score")


def placed(
    store: Store, conv: Conversation, question: Question, memory_id: int
) -> dict[str, float]:
    """The memory's rank (DEEP if it is not among the first DEEP hits) and score parts (0)."""
    request = SearchRequest(namespace=conv.namespace, query=question.text, k=DEEP, reinforce=False)
    hits = store.searcher.search(request, now=conv.now).hits
    for rank, hit in enumerate(hits):
        if hit.memory.id == memory_id:
            parts = hit.breakdown.as_dict()
            return {"rank": float(rank), **{name: parts[name] for name in PARTS}}
    return {"rank": float(DEEP), **dict.fromkeys(PARTS, 0.0)}


def by_turn(truth: Truth) -> dict[int, set[str]]:
    """Each turn stands for itself (the clean and the polluted store)."""
    return {memory_id: {dia_id} for dia_id, memory_id in truth.turns.items()}


def by_carrier(truth: Truth, chains: Chains, *, lenient: bool = False) -> dict[int, set[str]]:
    """Each active memory stands for the turns it carries; ``lenient``: and for the turns
    that the pollutants it carries copy, reword or update."""
    stands = truth.source_of() if lenient else {i: d for d, i in truth.turns.items()}
    out: dict[int, set[str]] = {}
    for holder, members in chains.carried_by(stands).items():
        out[holder] = {stands[m] for m in members}
    return out


def score(question: Question, hits: Sequence[int], represents: Represents) -> QuestionScore:
    wanted = set(question.evidence)

    def found(top: int) -> set[str]:
        covered: set[str] = set().union(*(represents.get(h, set()) for h in hits[:top]))
        return wanted & covered

    credited: set[str] = set()
    dcg = 0.0
    for rank, hit in enumerate(hits[:K]):
        new = (represents.get(hit, set()) & wanted) - credited
        if new:
            dcg += 1.0 / math.log2(rank + 2)
            credited |= new
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(wanted), K)))
    return QuestionScore(
        category=question.category,
        flagged=question.flagged,
        r5=len(found(5)) / len(wanted),
        r10=len(found(K)) / len(wanted),
        ndcg10=dcg / ideal,
    )


def recall(
    conversations: Iterable[Conversation],
    hits: Hits,
    represents: Mapping[str, Represents],
    *,
    skip: Mapping[str, set[str]] | None = None,
) -> dict[str, Any]:
    """Recall@5/@10 and NDCG@10 per category and overall, in percent; ``skip`` leaves out the
    questions with an evidence turn among a namespace's dia_ids."""
    scores = [
        score(question, found, represents[conv.namespace])
        for conv in conversations
        for question, found in zip(asked(conv), hits[conv.namespace], strict=True)
        if not (skip and skip.get(conv.namespace, set()) & set(question.evidence))
    ]
    return summarise(scores)


def attribution(
    conversations: Iterable[Conversation],
    before: tuple[Hits, Mapping[str, Represents]],
    after: tuple[Hits, Mapping[str, Represents]],
    changed: Mapping[str, Mapping[str, set[str]]],
) -> dict[str, dict[str, float]]:
    """Where R@10 moved between two stores, per question: those with an evidence turn an
    update changed (``changed``: namespace -> dia_id -> the words the update took out) and
    the others; per group the questions that did worse and better, and the points of overall
    R@10 the group moved. Of the changed ones that did worse, how many name a word the update
    took out (they ask about the very detail that changed)."""
    groups = {
        name: {"questions": 0, "worse": 0, "better": 0, "points": 0.0}
        for name in ("update", "other")
    }
    groups["update"]["worse_naming_the_changed_detail"] = 0
    total = 0
    for conv in conversations:
        rows = zip(asked(conv), before[0][conv.namespace], after[0][conv.namespace], strict=True)
        for question, old_hits, new_hits in rows:
            total += 1
            old = score(question, old_hits, before[1][conv.namespace]).r10
            new = score(question, new_hits, after[1][conv.namespace]).r10
            taken = [
                words
                for dia_id, words in changed.get(conv.namespace, {}).items()
                if dia_id in question.evidence
            ]
            group = groups["update" if taken else "other"]
            group["questions"] += 1
            group["worse"] += new < old
            group["better"] += new > old
            group["points"] += new - old
            asked_words = set(re.findall(r"\w+", question.text.lower()))
            if new < old and asked_words & set().union(*taken):
                group["worse_naming_the_changed_detail"] += 1
    for group in groups.values():
        group["points"] = round(100 * group["points"] / max(total, 1), 2)
    return groups
