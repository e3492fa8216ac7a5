"""A memory searched before its vector reaches the index: the search embeds it itself, so that
it ranks and scores as it will once indexed (SQLite, embedded Chroma, the ONNX embedder)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from secretary.config import Settings
from store.requests import SearchFilters, SearchRequest
from store.search import pending as pending_module
from store.search.pending import cosines, merged
from store.search.searcher import Hit
from store.service import Store
from store.vector.embedder import OnnxMiniLMEmbedder
from store.vector.index import VectorHit

NOW = datetime(2023, 7, 1, 12, 0, tzinfo=UTC)
NS = "ns"
AGENTS = 0.35  # the agents' threshold (MCP, client)
OLDER = [
    "Melanie: I painted a lake sunrise last year.",
    "The router configuration changed on the office network.",
    "Melanie: We adopted a puppy last week, what should we call her?",
    "Caroline: I am reading a novel about sailing around the world.",
]
NEW = "Caroline: my grandmother taught me to bake sourdough bread every Sunday."
ASKED = "who showed Caroline how to make loaves?"  # shares no word with NEW but Caroline


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(batch_size=16, threads=2)


@pytest.fixture
def store(tmp_path: Path, embedder: OnnxMiniLMEmbedder) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path), create=True, embedder=embedder)
    opened.add_memories(NS, [{"content": text} for text in OLDER], now=NOW)
    opened.indexer.sync()
    yield opened
    opened.close()


def _hit(store: Store, query: str, memory_id: int) -> Hit | None:
    request = SearchRequest(namespace=NS, query=query, k=10)
    found = store.searcher.search(request, now=NOW).hits
    return next((hit for hit in found if hit.memory.id == memory_id), None)


def test_search_memory_just_added_scores_as_once_indexed(store: Store) -> None:
    (new,) = store.add_memories(NS, [{"content": NEW}], now=NOW).ids
    assert store.db.work.outbox_size() == 1  # its vector has not reached Chroma
    before = _hit(store, ASKED, new)
    store.indexer.sync()
    after = _hit(store, ASKED, new)
    assert before is not None
    assert after is not None
    assert before.breakdown.relevance >= AGENTS  # recalled at once by an agent
    assert before.breakdown.relevance == pytest.approx(after.breakdown.relevance, abs=1e-4)
    assert before.score == pytest.approx(after.score, abs=1e-4)


def test_search_memory_edited_before_index_sync_scores_by_its_new_text(store: Store) -> None:
    (new,) = store.add_memories(NS, [{"content": "Caroline: I fixed the bike chain."}], now=NOW).ids
    store.indexer.sync()
    store.edit(NS, new, {"content": NEW}, now=NOW)
    assert store.db.work.outbox_size() == 1
    before = _hit(store, ASKED, new)
    store.indexer.sync()
    after = _hit(store, ASKED, new)
    assert before is not None
    assert after is not None
    assert before.breakdown.relevance == pytest.approx(after.breakdown.relevance, abs=1e-4)


def test_search_backlog_beyond_the_embedded_limit_is_left_to_the_index(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pending_module, "PENDING_EMBEDDED", 1)
    more = [{"content": NEW}, {"content": "Melanie: the puppy is called Biscuit."}]
    new, _ = store.add_memories(NS, more, now=NOW).ids
    waiting = _hit(store, ASKED, new)
    store.indexer.sync()
    indexed = _hit(store, ASKED, new)
    assert indexed is not None
    assert waiting is None or waiting.breakdown.relevance < indexed.breakdown.relevance - 0.05


def test_search_memory_waiting_embedded_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, embedder: OnnxMiniLMEmbedder
) -> None:
    (new,) = store.add_memories(NS, [{"content": NEW}], now=NOW).ids
    calls: list[list[str]] = []
    embed = embedder.embed

    def counted(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed(texts)

    monkeypatch.setattr(embedder, "embed", counted)
    for _ in range(3):
        assert _hit(store, ASKED, new) is not None
    assert sum(NEW in texts for texts in calls) == 1  # the queries are embedded each time


def test_search_of_a_namespace_whose_vectors_were_lost_says_so(store: Store) -> None:
    request = SearchRequest(namespace=NS, query="the puppy", k=3)
    assert store.searcher.search(request, now=NOW).degraded == ()
    ids = [m.id for m in store.db.memories.after(NS, 0, limit=100)]
    store.index.delete(NS, ids)  # as a Chroma directory restored from an older backup
    result = store.searcher.search(request, now=NOW)
    assert result.hits  # lexically
    (said,) = result.degraded
    assert "holds no vectors for this namespace's 4 memories" in said
    assert "secretary index rebuild" in said
    # A filtered search may rightly find no vector: it says nothing of the index.
    filtered = SearchRequest(
        namespace=NS, query="the puppy", k=3, filters=SearchFilters(types=("fact",))
    )
    assert store.searcher.search(filtered, now=NOW).degraded == ()


def test_search_of_a_namespace_whose_vectors_wait_in_the_outbox_is_not_degraded(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pending_module, "PENDING_EMBEDDED", 0)  # none embedded by the search
    store.add_memories("other", [{"content": "Caroline: the puppy is called Biscuit."}], now=NOW)
    request = SearchRequest(namespace="other", query="the puppy", k=3)
    result = store.searcher.search(request, now=NOW)
    assert result.hits
    assert result.degraded == ()


# -- pure helpers ------------------------------------------------------------------------------


def _hits(*pairs: tuple[int, float]) -> list[VectorHit]:
    return [VectorHit(memory_id=mid, similarity=value) for mid, value in pairs]


def test_merged_fresh_cosine_replaces_the_indexed_one_and_keeps_order() -> None:
    hits = _hits((1, 0.9), (2, 0.7), (3, 0.5))
    assert merged(hits, {2: 0.95, 9: 0.6}, n=3) == _hits((2, 0.95), (1, 0.9), (9, 0.6), (3, 0.5))


def test_merged_fresh_below_a_full_answer_left_out_as_the_index_would() -> None:
    hits = _hits((1, 0.9), (2, 0.7), (3, 0.5))
    # 9 is below the answer's last hit; 2's new text is too: both as if beyond the n nearest
    assert merged(hits, {9: 0.4, 2: 0.3}, n=3) == _hits((1, 0.9), (3, 0.5))


def test_merged_answer_shorter_than_asked_takes_every_fresh_cosine() -> None:
    assert merged(_hits((1, 0.2)), {9: -0.1}, n=5) == _hits((1, 0.2), (9, -0.1))
    assert merged([], {9: 0.3}, n=5) == _hits((9, 0.3))


def test_cosines_of_unit_vectors_with_any_query_length() -> None:
    vectors = {1: np.array([1.0, 0.0], np.float32), 2: np.array([0.6, 0.8], np.float32)}
    found = cosines(np.array([3.0, 0.0], np.float32), vectors)
    assert found == pytest.approx({1: 1.0, 2: 0.6})
    assert cosines(np.zeros(2, np.float32), vectors) == {1: 0.0, 2: 0.0}


def test_search_filtered_by_the_index_merges_only_waiting_memories_that_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store.search import searcher as searcher_module

    # Filters left to Chroma's `where` (too many memories would pass for SQL to list them).
    monkeypatch.setattr(searcher_module, "FILTER_CANDIDATES", 0)
    fact = {"content": "Caroline learned to bake bread from her grandmother.", "type": "fact"}
    (kept,) = store.add_memories(NS, [fact], now=NOW).ids
    store.indexer.sync()
    request = SearchRequest(namespace=NS, query=ASKED, k=10, filters=SearchFilters(types=("fact",)))

    def breakdown() -> tuple[float, float]:
        (hit,) = [h for h in store.searcher.search(request, now=NOW).hits if h.memory.id == kept]
        return hit.breakdown.dense, hit.score

    # An event (it fails the filter) nearer the query than any fact: the index leaves it out.
    store.add_memories(NS, [{"content": "Who showed Caroline how to make loaves?"}], now=NOW)
    waiting = breakdown()
    store.indexer.sync()
    assert waiting == pytest.approx(breakdown(), abs=1e-4)  # as once indexed


def test_search_of_a_namespace_without_memories_says_so(store: Store) -> None:
    request = SearchRequest(namespace="nobdy", query="the puppy", k=3)  # a misspelt name
    result = store.searcher.search(request, now=NOW)
    assert result.hits == ()
    assert result.degraded == ("namespace 'nobdy' holds no memories",)


def test_search_keeps_no_embedding_of_a_memory_once_forgotten(store: Store) -> None:
    from store.write.forget import ForgetSelection

    (new,) = store.add_memories(NS, [{"content": NEW}], now=NOW).ids
    assert _hit(store, ASKED, new) is not None  # embedded by the search, and kept
    kept = store.searcher._pending._kept  # what this process holds of the waiting memories
    assert [key[1] for key in kept] == [new]
    store.forget(NS, ForgetSelection(ids=(new,)), now=NOW)
    _hit(store, ASKED, new)
    assert [key[1] for key in kept] == []  # erased content leaves no vector behind here
