"""A search counts as a recall only of the hits relevant enough (``[reinforcement]
min_relevance``): a question about something absent strengthens nothing it brings back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from secretary.config import Settings
from store.requests import SearchRequest
from store.service import Store
from store.settings import ReinforcementSettings
from store.vector.embedder import OnnxMiniLMEmbedder

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NS = "ns"
MEMORIES = [
    "Maya adopted a rescue cat and named her Pepper.",
    "Maya works as a pediatric nurse at St. Mary's hospital.",
    "Maya's younger brother Leo is moving to Berlin for a job.",
]


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(batch_size=16, threads=2)


def _open(path: Path, embedder: OnnxMiniLMEmbedder, floor: float) -> Store:
    settings = Settings(data_dir=path, reinforcement=ReinforcementSettings(min_relevance=floor))
    store = Store.open(settings, create=True, embedder=embedder)
    store.add_memories(NS, [{"content": text} for text in MEMORIES], now=NOW)
    store.indexer.sync()
    return store


@pytest.fixture
def store(tmp_path: Path, embedder: OnnxMiniLMEmbedder) -> Iterator[Store]:
    opened = _open(tmp_path, embedder, floor=0.35)
    yield opened
    opened.close()


def _recalls(store: Store) -> dict[str, int]:
    store.reinforcer.flush()
    return {m.content: m.access_count for m in store.db.memories.after(NS, 0, limit=10)}


def _search(store: Store, query: str) -> list[float]:
    hits = store.search(SearchRequest(namespace=NS, query=query, k=3), now=NOW).hits
    return [hit.breakdown.relevance for hit in hits]


def test_search_recalls_only_the_hits_relevant_enough(store: Store) -> None:
    relevances = _search(store, "what is the name of Maya's cat?")
    assert relevances[0] >= 0.35 > min(relevances)  # one relevant hit, others returned too
    assert _recalls(store) == {MEMORIES[0]: 1, MEMORIES[1]: 0, MEMORIES[2]: 0}


def test_search_for_something_absent_recalls_nothing(store: Store) -> None:
    relevances = _search(store, "which programming language does she use at work?")
    assert relevances  # k hits come back all the same
    assert max(relevances) < 0.35
    assert set(_recalls(store).values()) == {0}


def test_min_relevance_0_recalls_every_hit(tmp_path: Path, embedder: OnnxMiniLMEmbedder) -> None:
    store = _open(tmp_path, embedder, floor=0.0)
    try:
        _search(store, "which programming language does she use at work?")
        assert set(_recalls(store).values()) == {1}
    finally:
        store.close()
