"""Tests of the BM25 lexical index and its per-namespace cache."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from store import lexical
from store.lexical import LexDoc, LexicalCache, LexicalIndex, LexicalView, tokenize


def _doc(memory_id: int, text: str, session: str | None = None) -> LexDoc:
    return LexDoc(memory_id=memory_id, text=text, session_key=session)


class FakeStore:
    """An in-memory namespace with loaders that count their calls."""

    def __init__(self, docs: Sequence[LexDoc] = ()) -> None:
        self.docs = list(docs)
        self.revision = 1
        self.load_all_calls = 0
        self.load_since_calls: list[int] = []
        self._lock = threading.Lock()

    def add(self, text: str, session: str | None = None) -> int:
        with self._lock:
            memory_id = max((d.memory_id for d in self.docs), default=0) + 1
            self.docs.append(_doc(memory_id, text, session))
            self.revision += 1
            return memory_id

    def load_all(self) -> list[LexDoc]:
        with self._lock:
            self.load_all_calls += 1
            return list(self.docs)

    def load_since(self, after: int) -> list[LexDoc]:
        with self._lock:
            self.load_since_calls.append(after)
            return [d for d in self.docs if d.memory_id > after]

    def view(self, cache: LexicalCache, namespace: str = "ns") -> LexicalView:
        return cache.get(namespace, self.revision, self.load_all, self.load_since)


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


def test_cache_get_first_time_builds_base() -> None:
    store = FakeStore(CORPUS)
    view = store.view(LexicalCache())
    assert (len(view), view.tail_size) == (5, 0)
    assert (store.load_all_calls, store.load_since_calls) == (1, [])


def test_cache_get_revision_unchanged_does_not_load() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache()
    first = store.view(cache)
    second = store.view(cache)
    assert second is first
    assert (store.load_all_calls, store.load_since_calls) == (1, [])


def test_cache_get_new_docs_found_in_tail_without_rebuild() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache()
    store.view(cache)
    new_id = store.add("Bought a new bicycle in 2024")
    view = store.view(cache)
    assert list(view.search("bicycles", 10)) == [new_id]
    assert next(iter(view.search("paris bicycle", 10))) == new_id  # rarer term ranks first
    newer_id = store.add("The bicycle has a flat tyre", "s2")
    view = store.view(cache)
    assert set(view.search("bicycle", 10)) == {new_id, newer_id}
    assert "s2" in view.search_sessions("tyre", 10)
    assert (store.load_all_calls, store.load_since_calls) == (1, [5, 6])
    assert view.tail_size == 2


def test_cache_get_revision_changed_without_new_docs_keeps_index() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache()
    first = store.view(cache)
    store.revision += 1  # e.g. a memory archived: no new ids
    assert store.view(cache) is first
    store.view(cache)
    assert (store.load_all_calls, store.load_since_calls) == (1, [5])


def test_cache_get_tail_beyond_max_tail_rebuilds_base() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache(max_tail=2)
    store.view(cache)
    store.add("first extra memory")
    store.add("second extra memory")
    assert store.view(cache).tail_size == 2
    store.add("third extra memory")
    view = store.view(cache)
    assert (view.tail_size, len(view), store.load_all_calls) == (0, 8, 2)
    assert len(view.search("extra", 10)) == 3
    store.add("fourth extra memory")
    assert store.view(cache).tail_size == 1
    assert store.load_since_calls[-1] == 8  # the rebuilt base's highest id


def test_cache_get_empty_namespace_then_writes_uses_tail() -> None:
    store, cache = FakeStore(), LexicalCache()
    assert store.view(cache).search("anything", 5) == {}
    store.add("hello world")
    assert list(store.view(cache).search("world", 5)) == [1]
    assert (store.load_all_calls, store.load_since_calls) == (1, [-1])


def test_cache_invalidate_forces_rebuild() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache()
    store.view(cache)
    store.docs[0] = _doc(1, "edited in place: violin lessons", "s1")
    cache.invalidate("ns")
    assert list(store.view(cache).search("violin", 5)) == [1]
    assert store.load_all_calls == 2


def test_cache_get_beyond_max_namespaces_evicts_least_recently_used() -> None:
    stores = {name: FakeStore(CORPUS) for name in ("a", "b", "c")}
    cache = LexicalCache(max_namespaces=2)
    stores["a"].view(cache, "a")
    stores["b"].view(cache, "b")
    stores["a"].view(cache, "a")  # a is now more recent than b
    stores["c"].view(cache, "c")  # evicts b
    assert len(cache) == 2
    for name in ("a", "b", "c"):
        stores[name].view(cache, name)
    assert [stores[n].load_all_calls for n in ("a", "b", "c")] == [1, 2, 2]


def test_cache_get_many_threads_searching_and_writing_stay_consistent() -> None:
    store, cache = FakeStore(CORPUS), LexicalCache(max_tail=5)
    errors: list[BaseException] = []

    def writer() -> None:
        for i in range(30):
            store.add(f"concurrent note number{i}")

    def reader() -> None:
        try:
            for _ in range(60):
                for namespace in ("ns", "other"):
                    view = store.view(cache, namespace)
                    assert all(0 < s <= 1.0 for s in view.search("concurrent note", 50).values())
                    assert view.search("dog", 5)
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = store.view(cache)
    assert len(final.search("concurrent", 100)) == 30
    assert len(final) == 35


def test_cache_init_invalid_limits_raise() -> None:
    with pytest.raises(ValueError, match="max_namespaces"):
        LexicalCache(max_namespaces=0)
