"""Tests of the BM25 lexical index: tokenising, building, searching, views, filters."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from store.lexical import index as lexical
from store.lexical.columns import merge
from store.lexical.index import LexDoc, LexicalIndex, tokenize
from store.lexical.view import LexicalView
from store.requests import FACET_VALUE_CHARS, SearchFilters


def _doc(memory_id: int, text: str, session: str | None = None) -> LexDoc:
    return LexDoc(memory_id=memory_id, text=text, session_key=session)


CORPUS = [
    _doc(1, "2023-05-01 I went running in the park with my dog", "s1"),
    _doc(2, "2023-05-01 The dog chased a squirrel up a tree", "s1"),
    _doc(3, "2023-06-12 We talked about the trip to Paris in 2024", "s2"),
    _doc(4, "2023-06-12 Paris was rainy but the museums were great", "s2"),
    _doc(5, "A note without a session about tax forms"),
]


def test_tokenize_english_text_stems_lowercases_and_drops_stopwords() -> None:
    assert tokenize(["What did I say? The Runners were RUNNING in 2023, 3 times"]) == [
        ["say", "runner", "run", "2023", "3", "time"]
    ]


def test_index_search_inflected_query_finds_stemmed_match() -> None:
    index = LexicalIndex.build(CORPUS)
    assert list(index.search("runs", 10)) == [1]


def test_index_search_scores_normalised_best_is_one() -> None:
    scores = LexicalIndex.build(CORPUS).search("dog park", 10)
    assert list(scores) == [1, 2]  # best first
    assert scores[1] == 1.0
    assert 0 < scores[2] < 1.0


def test_index_search_year_query_matches_number_token() -> None:
    assert list(LexicalIndex.build(CORPUS).search("2024", 10)) == [3]


def test_index_search_stopword_only_query_returns_empty() -> None:
    assert LexicalIndex.build(CORPUS).search("the of and to in", 10) == {}


def test_index_search_unknown_terms_return_empty() -> None:
    assert LexicalIndex.build(CORPUS).search("xylophone quasar", 10) == {}


def test_index_search_punctuation_only_query_returns_empty() -> None:
    assert LexicalIndex.build(CORPUS).search("?! ...", 10) == {}


def test_index_search_k_larger_than_corpus_returns_all_matches() -> None:
    assert set(LexicalIndex.build(CORPUS).search("paris dog", 1000)) == {1, 2, 3, 4}


def test_index_search_k_limits_results_to_best() -> None:
    index = LexicalIndex.build(CORPUS)
    ranked = list(index.search("paris dog", 10).items())
    assert len(ranked) == 4
    assert list(index.search("paris dog", 2).items()) == ranked[:2]


def test_index_search_k_zero_returns_empty() -> None:
    assert LexicalIndex.build(CORPUS).search("dog", 0) == {}


def test_index_search_empty_index_returns_empty() -> None:
    index = LexicalIndex.build([])
    assert (len(index), index.search("dog", 5), index.search_sessions("dog", 5)) == (0, {}, {})


def test_index_search_docs_without_tokens_returns_empty() -> None:
    index = LexicalIndex.build([_doc(1, "the a of"), _doc(2, "")])
    assert (len(index), index.search("the", 5)) == (2, {})


def test_index_build_debug_logging_emits_no_bm25s_output(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    LexicalIndex.build(CORPUS).search("dog", 5)
    assert [r for r in caplog.records if r.name.startswith("bm25s")] == []
    assert capsys.readouterr() == ("", "")  # no progress bars


def test_index_build_duplicate_ids_raises() -> None:
    with pytest.raises(ValueError, match="duplicate memory_id"):
        LexicalIndex.build([_doc(1, "a b"), _doc(1, "c d")])


def test_index_search_sessions_scores_whole_session() -> None:
    scores = LexicalIndex.build(CORPUS).search_sessions("dog squirrel", 10)
    assert scores == {"s1": 1.0}


def test_index_search_sessions_terms_split_across_turns_match_session() -> None:
    # "rainy" and "trip" are in different turns of s2; only the session document has both.
    index = LexicalIndex.build(CORPUS)
    sessions = index.search_sessions("rainy trip", 10)
    assert sessions == {"s2": 1.0}
    assert set(index.search("rainy trip", 10)) == {3, 4}


def test_index_search_sessions_unsessioned_docs_are_not_sessions() -> None:
    assert LexicalIndex.build(CORPUS).search_sessions("tax forms", 10) == {}


def test_index_search_sessions_scattered_turns_scored_as_one_document() -> None:
    # A session's turns need not be adjacent: its document is all of them, so it scores
    # exactly as a memory with the concatenated text would.
    scattered = LexicalIndex.build(
        [_doc(1, "apple pear", "a"), _doc(2, "kiwi melon", "b"), _doc(3, "plum apple", "a")]
    )
    joined = LexicalIndex.build([_doc(10, "apple pear plum apple"), _doc(11, "kiwi melon")])
    for query in ("apple", "plum kiwi", "pear melon apple"):
        sessions = scattered.search_sessions(query, 10)
        memories = joined.search(query, 10)
        assert [{10: "a", 11: "b"}[key] for key in memories] == list(sessions)
        assert list(sessions.values()) == pytest.approx(list(memories.values()))


def test_index_build_in_chunks_matches_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks share one vocabulary: a term first seen in a later chunk keeps its statistics.
    docs = [*CORPUS, _doc(6, "the dog and the parrot", "s3"), _doc(7, "parrot in Paris", "s1")]
    whole = LexicalIndex.build(docs)
    monkeypatch.setattr(lexical, "_BUILD_CHUNK", 2)
    chunked = LexicalIndex.build(iter(docs))  # a stream, as the cache's loader gives
    for query in ("dog", "parrot paris", "rainy trip squirrel", "2024 tax"):
        assert chunked.search(query, 10) == pytest.approx(whole.search(query, 10))
        assert list(chunked.search(query, 10)) == list(whole.search(query, 10))
        assert chunked.search_sessions(query, 10) == pytest.approx(whole.search_sessions(query, 10))


def test_view_search_base_and_tail_equal_lengths_matches_full_index() -> None:
    # Every doc has 3 tokens, so both parts share the average length and the IDF correction
    # must reproduce a single index over all documents.
    words = ["apple", "berry", "cherry", "grape", "lemon", "mango", "olive", "peach"]
    docs = [
        _doc(i + 1, " ".join(words[(i * j) % 8] + str(j) for j in range(3)), f"s{i % 4}")
        for i in range(40)
    ]
    full = LexicalIndex.build(docs)
    view = LexicalView(LexicalIndex.build(docs[:30]), LexicalIndex.build(docs[30:]))
    query = "apple0 grape1 cherry2 lemon1"
    expected, got = full.search(query, 50), view.search(query, 50)
    assert got.keys() == expected.keys()
    assert all(got[key] == pytest.approx(score, rel=1e-5) for key, score in expected.items())


def test_view_dead_documents_are_not_found_and_not_counted() -> None:
    base = LexicalIndex.build(CORPUS)
    dead = base.position(np.array([1, 2], dtype=np.int64))
    view = LexicalView(base, LexicalIndex.build([_doc(1, "now about a violin", "s1")]), dead=dead)
    assert list(view.search("dog", 10)) == []
    assert list(view.search("violin", 10)) == [1]
    assert (len(view), view.dead_count, view.tail_size) == (4, 2, 1)


def test_build_unsorted_documents_are_indexed_by_id() -> None:
    shuffled = LexicalIndex.build([CORPUS[3], CORPUS[0], CORPUS[4], CORPUS[2], CORPUS[1]])
    ordered = LexicalIndex.build(CORPUS)
    assert shuffled.columns.keys.tolist() == [1, 2, 3, 4, 5]
    for query in ("dog paris", "rainy trip", "tax"):
        assert shuffled.search(query, 10) == ordered.search(query, 10)
        assert shuffled.search_sessions(query, 10) == ordered.search_sessions(query, 10)


# -- merging columns ----------------------------------------------------------------------------


def test_merge_of_parts_scores_exactly_as_a_build_of_the_same_documents() -> None:
    docs = [*CORPUS, _doc(6, "the dog and the parrot", "s3"), _doc(7, "parrot in Paris", "s1")]
    first = LexicalIndex.build(docs[:4]).columns
    second = LexicalIndex.build([docs[6], docs[4], docs[5]]).columns
    merged = LexicalIndex.from_columns(merge([second, first]))
    fresh = LexicalIndex.build(docs)
    for query in ("dog", "parrot paris", "rainy trip squirrel", "2024 tax", "park"):
        assert merged.search(query, 10) == fresh.search(query, 10)  # equal floats, same order
        assert merged.search_sessions(query, 10) == fresh.search_sessions(query, 10)
    assert merged.columns.session.names == fresh.columns.session.names


def test_merge_keeps_only_the_words_and_sessions_its_documents_have() -> None:
    columns = LexicalIndex.build(CORPUS).columns
    kept = columns.take(np.array([0, 4], dtype=np.int64))  # drops 2, 3, 4: session s2 goes
    merged = merge([kept])
    assert "pari" not in merged.tokens.names
    assert "squirrel" not in merged.tokens.names
    assert merged.session.names == ["s1"]
    words = tokenize([CORPUS[0].text, CORPUS[4].text])
    assert sorted(merged.tokens.names) == sorted(set(words[0] + words[1]))


def test_merge_repeated_memory_id_raises() -> None:
    columns = LexicalIndex.build(CORPUS[:2]).columns
    with pytest.raises(ValueError, match="duplicate memory_id"):
        merge([columns, columns])


# -- filters ------------------------------------------------------------------------------------

MAY = datetime(2023, 5, 1, tzinfo=UTC)
FILTERED = [
    LexDoc(memory_id=1, text="red kite over the hill", session_key=None, type="event",
           event_time=MAY, tags=("birds", "walks"), metadata={"channel": "voice", "n": 3}),
    LexDoc(memory_id=2, text="red kite in the garden", session_key=None, type="fact",
           event_time=MAY + timedelta(days=30), tags=("birds",), metadata={"channel": "chat"}),
    LexDoc(memory_id=3, text="a red kite book", session_key=None, type="event",
           event_time=MAY + timedelta(days=60), tags=(), metadata={"ok": True, "long": "x" * 300}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("filters", "found"),
    [
        (SearchFilters(), [1, 2, 3]),
        (SearchFilters(types=("event",)), [1, 3]),
        (SearchFilters(types=("preference",)), []),
        (SearchFilters(tags=("birds",)), [1, 2]),
        (SearchFilters(tags=("birds", "walks")), [1]),
        (SearchFilters(tags=("cats",)), []),
        (SearchFilters(since=MAY + timedelta(days=30)), [2, 3]),
        (SearchFilters(until=MAY + timedelta(days=30)), [1]),
        (SearchFilters(metadata=(("channel", "voice"),)), [1]),
        (SearchFilters(metadata=(("n", "3"),)), [1]),
        (SearchFilters(metadata=(("ok", "true"),)), [3]),
        (SearchFilters(metadata=(("n", "three"),)), []),
        # A value too long to be a facet restricts nothing here (SQL checks every hit).
        (SearchFilters(metadata=(("long", "x" * 300),)), [1, 2, 3]),
        (SearchFilters(types=("event",), tags=("birds",)), [1]),
    ],
)
def test_view_search_filters_applied_in_the_index(filters: SearchFilters, found: list[int]) -> None:
    view = LexicalView(LexicalIndex.build(FILTERED[:2]), LexicalIndex.build(FILTERED[2:]))
    assert sorted(view.search("red kite", 10, filters=filters)) == found
    exact = [doc.memory_id for doc in FILTERED if filters.matches(_FilterRow(doc))]
    if not any(len(value) > FACET_VALUE_CHARS for _, value in filters.metadata):
        assert found == exact  # the index agrees with SQL's own check


class _FilterRow:
    def __init__(self, doc: LexDoc) -> None:
        self.type, self.tags, self.metadata = doc.type, list(doc.tags), dict(doc.metadata)
        assert doc.event_time is not None
        self.event_time = doc.event_time
