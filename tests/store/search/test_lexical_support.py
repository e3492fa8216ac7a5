"""Lexical evidence that holds little of the query counts little (``lexical_support``).

A request that should follow a preference stated once rarely shares its words: "can you
recommend some cafes in San Francisco?" for "I follow a strict gluten-free diet". BM25's best
match is then whatever shares a word ("recommend"), and divided by the best it would count in
full. PrefEval (bench/families/prefeval) is that shape; LoCoMo's questions, whose best matches
hold much of the question, are not touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from secretary.config import Settings
from store.lexical.index import LexDoc, LexicalIndex, tokenize
from store.lexical.view import LexicalView
from store.requests import SearchRequest
from store.search.scoring import lexical_parts, lexical_support
from store.search.searcher import Searcher, supports
from store.service import Store
from store.settings import RetrievalSettings
from store.vector.embedder import OnnxMiniLMEmbedder

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
NS = "ana"
DIET = "I follow a strict gluten-free and dairy-free diet because of severe intolerances."
PREFERENCES = [
    DIET,
    "I love old jazz records, especially Coltrane and Miles Davis.",
    "I can't stand horror movies, I would rather watch a documentary.",
    "My friend Rita would recommend her new phone to anyone who takes photos.",
    "I only buy clothes made from natural fabrics like cotton and linen.",
    "I like to get up early and run before work.",
]
REQUEST = "Could you recommend a recipe for bread that I can eat, without any wheat flour?"


def test_support_is_full_from_the_floor_and_falls_off_below_it() -> None:
    assert lexical_support(0.5, 0.2) == 1.0
    assert lexical_support(0.2, 0.2) == 1.0
    assert lexical_support(0.1, 0.2) == pytest.approx(0.25)
    assert lexical_support(0.0, 0.2) == 0.0
    assert lexical_support(0.0, 0.0) == 1.0  # off
    # Scaled before the exponent: the best match keeps its place among the others.
    assert lexical_parts({1: 1.0, 2: 0.5}, 1.5, 0.25) == pytest.approx(
        {1: 0.25**1.5, 2: 0.125**1.5}
    )


def _doc(memory_id: int, text: str, session: str | None, minute: int) -> LexDoc:
    return LexDoc(
        memory_id=memory_id,
        text=text,
        session_key=session,
        event_time=NOW + timedelta(minutes=minute),
    )


def test_holding_reads_a_memorys_terms_and_with_context_the_memory_before_it() -> None:
    base = LexicalIndex.build(
        [
            _doc(10, "did you see the cello concert?", "s1", 0),
            _doc(11, "yes, it was amazing", "s1", 1),
            _doc(12, "the cello teacher moved away", None, 2),
        ]
    )
    tail = LexicalIndex.build([_doc(13, "amazing tomatoes on the balcony", None, 3)])
    view = LexicalView(base, tail)
    cello, amazing, tomato = tokenize(["cello amazing tomatoes"])[0]
    terms = [cello, amazing, tomato]
    assert view.holding([11, 12, 13], terms) == {
        11: frozenset({amazing}),
        12: frozenset({cello}),
        13: frozenset({amazing, tomato}),
    }
    # With its context, the reply holds the question's words; a memory without one does not.
    assert view.holding([11, 12], terms, context=True) == {
        11: frozenset({cello, amazing}),
        12: frozenset({cello}),
    }
    assert view.holding([99], terms) == {}
    # A tail memory whose session goes on from the base: its context is the base row before it.
    chained = LexicalView(base, LexicalIndex.build([_doc(14, "ok then", "s1", 5)]))
    assert chained.holding([14], terms) == {14: frozenset()}
    assert chained.holding([14], terms, context=True) == {14: frozenset({amazing})}
    # A memory changed since the base was built: its base row is dead, its tail row holds it.
    changed = LexicalView(
        base, LexicalIndex.build([_doc(12, "tomatoes again", None, 4)]), dead=np.array([2])
    )
    assert changed.holding([12], terms) == {12: frozenset({tomato})}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    embedder = OnnxMiniLMEmbedder(batch_size=16, threads=2)
    opened = Store.open(
        Settings(data_dir=tmp_path_factory.mktemp("support")), create=True, embedder=embedder
    )
    items = [
        {"content": text, "timestamp": NOW - timedelta(days=3 * (i + 1))}
        for i, text in enumerate(PREFERENCES)
    ]
    opened.add_memories(NS, items, now=NOW)
    opened.indexer.sync()
    yield opened
    opened.close()


def _first(store: Store, settings: RetrievalSettings) -> str:
    searcher = Searcher(
        reads=store.db.search,
        memories=store.db.memories,
        index=lambda: store.index,
        lexical=store.lexical,
        settings=settings,
    )
    request = SearchRequest(namespace=NS, query=REQUEST, k=3, reinforce=False)
    return searcher.search(request, now=NOW).hits[0].memory.content


def test_a_request_finds_the_preference_it_implies_not_the_memory_sharing_one_word(
    store: Store,
) -> None:
    assert _first(store, RetrievalSettings()) == DIET
    # Without the support, the one memory holding "recommend" is the best lexical match at
    # full weight, and comes first.
    assert _first(store, RetrievalSettings(lexical_support=0)) == PREFERENCES[3]


def test_a_question_sharing_its_words_with_a_memory_keeps_its_lexical_part(
    store: Store,
) -> None:
    request = SearchRequest(namespace=NS, query="what does Rita recommend?", reinforce=False)
    hit = store.searcher.search(request, now=NOW).hits[0]
    assert hit.memory.content == PREFERENCES[3]
    assert hit.breakdown.lexical == pytest.approx(1.0)


def test_supports_judges_each_reading_by_its_own_best_matches() -> None:
    view = LexicalView(
        LexicalIndex.build(
            [
                _doc(1, "the cello teacher moved to Porto", None, 0),
                _doc(2, "tomatoes on the balcony", None, 1),
                _doc(3, "a rainy day", None, 2),
            ]
        )
    )
    terms = (frozenset(tokenize(["cello teacher porto tomatoes rainy weather forecast"])[0]),)
    idf = view.idf(terms[0])
    readings = [{1: 1.0, 3: 0.2}, {3: 1.0}]  # a chat's focus and its excerpt, say
    focus, excerpt = supports(view, readings, terms, idf, RetrievalSettings())
    assert focus == 1.0  # memory 1 holds 3 of the 7 terms
    assert 0 < excerpt < 1  # memory 3 holds one
    assert supports(view, readings, terms, idf, RetrievalSettings(lexical_support=0)) == [1.0, 1.0]
    # No lexical evidence: nothing to scale.
    assert supports(view, [{}], terms, idf, RetrievalSettings()) == [0.0]
