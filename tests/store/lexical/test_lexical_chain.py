"""The lexical context: each memory scored with the one before it in its session."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from store.lexical.cache import LexicalCache
from store.lexical.chain import Chain, chained_top_k, context_scores, predecessors
from store.lexical.index import LexDoc, LexicalIndex, Scope, tokenise_docs, tokenize
from store.lexical.view import LexicalView, _live_counts
from store.requests import SearchFilters
from tests.store.lexical.test_lexical_cache import Namespace

T = datetime(2023, 5, 8, 10, 0, tzinfo=UTC)
QUESTION = "pottery class in Paris"


def doc(
    memory_id: int,
    text: str,
    session: str | None,
    minute: int = 0,
    *,
    version: int = 0,
    tags: tuple[str, ...] = (),
) -> LexDoc:
    return LexDoc(
        memory_id=memory_id,
        text=text,
        session_key=session,
        event_time=T + timedelta(minutes=minute),
        version=version,
        tags=tags,
    )


CHAT = [
    doc(1, "Did you go to the pottery class in Paris?", "s1", 0),
    doc(2, "Yes! It was amazing, I made a bowl.", "s1", 1),
    doc(3, "Let us talk about the weather instead.", "s2", 0),
    doc(4, "Sunny all week, finally.", "s2", 1),
    doc(5, "No session: a pottery shop sells bowls.", None, 0),
]


def test_the_memory_before_is_the_previous_one_of_its_session_by_time_then_id() -> None:
    sessions = np.array([0, 0, 1, 0, -1, 1, 0], dtype=np.int32)
    event_us = np.array([5, 1, 3, 5, 0, 3, 9], dtype=np.int64)
    keys = np.array([10, 11, 12, 13, 14, 15, 16], dtype=np.int64)

    before = predecessors(sessions, event_us, keys)

    # Session 0 in order: 11 (t1), 10 (t5), 13 (t5, a larger id), 16 (t9); session 1: 12, 15.
    assert before.tolist() == [1, -1, -1, 0, -1, 2, 3]


def test_a_memory_long_after_the_one_before_it_in_its_session_has_no_context() -> None:
    sessions = np.zeros(4, dtype=np.int32)
    minutes = np.array([0, 1, 1 + 720, 1 + 720 + 721], dtype=np.int64)  # 1 min, 12 h, 12 h 1 min
    event_us = minutes * 60_000_000

    assert predecessors(sessions, event_us, np.arange(4)).tolist() == [-1, 0, 1, -1]

    months = [doc(1, QUESTION, "user", 0), doc(2, "Yes! It was amazing.", "user", 90 * 24 * 60)]
    assert 2 not in LexicalView(LexicalIndex.build(months)).search(QUESTION, 10, context=1.0)


def test_a_reply_is_found_by_the_words_of_the_turn_it_answers() -> None:
    view = LexicalView(LexicalIndex.build(CHAT))

    assert 2 not in view.search(QUESTION, 10)
    found = view.search(QUESTION, 10, context=0.8)

    assert list(found)[:2] == [1, 2]
    assert found[1] == 1.0
    assert 0.0 < found[2] < 0.8  # its context, the question and more words, is not the best


@pytest.mark.parametrize("seed", range(4))
def test_a_context_scores_as_the_memory_and_the_one_before_it_indexed_as_one(seed: int) -> None:
    rng = random.Random(seed)
    # Zipf-like: the common words take the pass over every row, the rare ones the sparse path.
    words = [f"word{i}" for i in range(60)]
    weights = [1 / (rank + 1) ** 1.3 for rank in range(60)]
    docs = [
        doc(i, " ".join(rng.choices(words, weights, k=rng.randrange(1, 9))), rng.choice("abc"), i)
        for i in range(1, 301)
    ]
    by_id = {d.memory_id: d for d in docs}
    index = LexicalIndex.build(docs)
    chain = LexicalView(index).chain
    together = LexicalIndex.build(
        [
            replace(d, text=f"{d.text} {by_id[int(chain.keys[before])].text}")
            if before >= 0 else d
            for d, before in zip(docs, chain.before.tolist(), strict=True)
        ]
    )  # fmt: skip
    queries = [[word] for word in words] + [rng.sample(words, 4) for _ in range(10)]

    for query in queries:
        counts = Counter(tokenize([" ".join(query)])[0])
        terms = [(float(n), *_live_counts([(index, Scope())], term)) for term, n in counts.items()]
        scores = context_scores(terms, chain)

        known = {term: float(n) for term, n in counts.items() if term in together.vocab}
        expected = together.memory_part.scores(known)
        assert np.flatnonzero(scores).tolist() == np.flatnonzero(expected).tolist()
        assert scores == pytest.approx(expected, rel=1e-5)


def test_no_context_across_sessions_or_without_one() -> None:
    view = LexicalView(LexicalIndex.build([*CHAT, doc(6, "What a find!", None, 1)]))

    # 3 and 4 are another session's; 6 follows 5 in time, but neither has a session.
    assert set(view.search(QUESTION, 10, context=1.0)) == {1, 2, 5}
    assert view.search("shop", 10, context=1.0) == {5: 1.0}
    assert set(view.search("weather", 10, context=1.0)) == {3, 4}


def test_the_mix_keeps_the_better_of_own_and_weighted_context_over_their_bests() -> None:
    before = np.array([-1, 0, 1])
    chain = Chain(np.array([7, 8, 9]), np.ones(3, np.int64), before, k1=0.9, b=0.4)
    own = np.array([4.0, 1.0, 0.0])
    context = np.array([4.0, 5.0, 1.0], dtype=np.float32)

    mixed = chained_top_k(own.copy(), context.copy(), chain, 10, 0.5)

    assert mixed == {7: 1.0, 8: pytest.approx(0.5), 9: pytest.approx(0.1)}
    assert chained_top_k(own.copy(), context.copy(), chain, 1, 0.5) == {7: 1.0}
    hidden = np.array([True, False, False])
    assert chained_top_k(own.copy(), context.copy(), chain, 10, 0.5, outside=hidden) == {
        8: 1.0,
        9: pytest.approx(0.1),
    }
    assert chained_top_k(np.zeros(3), np.zeros(3, np.float32), chain, 10, 0.5) == {}


def test_a_dead_memory_lends_nothing_and_is_not_returned() -> None:
    base = LexicalIndex.build(CHAT)
    # Memory 1 was rewritten without the question's words: dead in the base, new in the tail.
    tail = LexicalIndex.from_tokenised(tokenise_docs([doc(1, "Did you go out?", "s1", 0)]))
    view = LexicalView(base, tail, dead=base.position(np.array([1])))

    assert view.search(QUESTION, 10, context=1.0) == {5: 1.0}


def test_a_filter_narrows_what_is_returned_not_where_context_comes_from() -> None:
    tagged = [doc(1, CHAT[0].text, "s1", 0), doc(2, CHAT[1].text, "s1", 1, tags=("art",))]
    view = LexicalView(LexicalIndex.build(tagged))

    found = view.search(QUESTION, 10, filters=SearchFilters(tags=["art"]), context=0.8)

    assert found == {2: 1.0}
    assert view.search(QUESTION, 10, among=frozenset({1}), context=0.8) == {1: 1.0}


def test_a_memory_put_between_two_takes_the_place_before_the_later_one() -> None:
    base = LexicalIndex.build([CHAT[0], CHAT[1]])
    between = doc(6, "Before that: I had no idea what to expect.", "s1", 0)
    view = LexicalView(base, LexicalIndex.from_tokenised(tokenise_docs([between])))

    # 1 -> 6 -> 2: the question no longer stands right before the reply.
    assert 2 not in view.search(QUESTION, 10, context=1.0)
    assert set(view.search(QUESTION, 10, context=1.0)) == {1, 6}


@pytest.mark.parametrize("seed", range(20))
def test_a_view_chains_its_memories_as_a_fresh_build_of_them_does(seed: int) -> None:
    rng = random.Random(seed)
    sessions = ["a", "b", "c", None]
    docs = [doc(i, f"memory {i}", rng.choice(sessions), rng.randrange(30)) for i in range(1, 41)]
    base = LexicalIndex.build(docs)
    dead_ids = sorted(rng.sample(range(1, 41), rng.randrange(8)))
    changed = [  # some dead ones come back, elsewhere in time or in another session
        doc(i, f"memory {i} again", rng.choice(sessions), rng.randrange(30), version=1)
        for i in dead_ids
        if rng.random() < 0.5
    ]
    added = [doc(i, f"new {i}", rng.choice(sessions), rng.randrange(30)) for i in range(41, 48)]
    tail = LexicalIndex.from_tokenised(tokenise_docs(changed + added))
    view = LexicalView(base, tail, dead=base.position(np.array(dead_ids, dtype=np.int64)))

    live = [d for d in docs if d.memory_id not in dead_ids] + changed + added
    fresh = LexicalIndex.build(live)
    expected = {
        int(key): None if before < 0 else int(fresh.columns.keys[before])
        for key, before in zip(fresh.columns.keys, fresh.before, strict=True)
    }
    chain = view.chain
    dead_rows = set(base.position(np.array(dead_ids, dtype=np.int64)).tolist())
    got = {
        int(chain.keys[row]): None if before < 0 else int(chain.keys[before])
        for row, before in enumerate(chain.before.tolist())
        if row not in dead_rows
    }
    assert got == expected


def test_a_forgotten_memory_lends_its_successor_nothing_here_or_after_a_restart(
    tmp_path: Path,
) -> None:
    source = Namespace([CHAT[0], CHAT[1]])
    cache = LexicalCache(tmp_path)
    assert set(cache.get("ns", source).search(QUESTION, 10, context=1.0)) == {1, 2}

    source.forget(1)
    cache.erase("ns", source)

    assert cache.get("ns", source).search(QUESTION, 10, context=1.0) == {}
    assert LexicalCache(tmp_path).get("ns", source).search(QUESTION, 10, context=1.0) == {}


def test_a_saved_index_mapped_again_scores_context_as_a_fresh_build(tmp_path: Path) -> None:
    source = Namespace(CHAT)
    LexicalCache(tmp_path).get("ns", source)  # builds and saves
    restarted = LexicalCache(tmp_path)

    mapped = restarted.get("ns", source)

    assert restarted.builds == 0
    fresh = LexicalView(LexicalIndex.build(CHAT))
    for query in (QUESTION, "bowl weather", "sunny pottery"):
        assert mapped.search(query, 10, context=0.8) == fresh.search(query, 10, context=0.8)
