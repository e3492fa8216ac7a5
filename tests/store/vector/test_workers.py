"""The API process's background work: the start-up warm-up and settling the heap after it (the
index worker: test_api.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from secretary.config import Settings
from store.api.app import create_app
from store.api.deps import api_state
from store.service import Store
from store.vector.index import VectorIndexError
from store.vector.workers import Warmer, settle_heap
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path), create=True, embedder=FakeEmbedder())
    yield opened
    opened.close()


def _add(store: Store, namespace: str, count: int) -> None:
    items = [{"content": f"memory {i} of {namespace}"} for i in range(count)]
    store.add_memories(namespace, items, now=NOW)


def test_warm_namespaces_largest_first_up_to_cache_capacity(store: Store) -> None:
    for namespace, count in (("small", 1), ("big", 3), ("middle", 2)):
        _add(store, namespace, count)
    assert store.warm_namespaces() == ["big", "middle", "small"]
    assert store.db.memories.largest_namespaces(2) == ["big", "middle"]


def test_warm_up_builds_lexical_index_and_opens_collection(store: Store) -> None:
    _add(store, "maya", 3)
    store.indexer.sync()
    embedder = store.embedder
    assert isinstance(embedder, FakeEmbedder)
    store.warm_up("maya")
    assert len(store.lexical) == 1
    assert embedder.calls  # the model was used once
    # The next search finds the index current: nothing is loaded again.
    assert store.lexical.get("maya", _Current(store))  # type: ignore[arg-type]


class _Current:
    """The store's counters, and loaders that fail: the warm index must need none of them."""

    def __init__(self, store: Store) -> None:
        self.revisions = store.db.search.revisions

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the warm index was loaded again ({name})")


def test_warmer_failing_namespace_goes_on_with_the_next() -> None:
    warmed: list[str] = []

    def warm(namespace: str) -> None:
        if namespace == "broken":
            raise VectorIndexError("Chroma is down")
        warmed.append(namespace)

    warmer = Warmer(lambda: ["a", "broken", "b"], warm)
    warmer.run()
    assert warmed == ["a", "b"]
    assert warmer.done.is_set()


def test_warmer_database_down_finishes_without_raising() -> None:
    def namespaces() -> list[str]:
        raise OperationalError("SELECT", {}, Exception("database is down"))

    warmer = Warmer(namespaces, lambda namespace: None)
    warmer.run()
    assert warmer.done.is_set()


def test_warmer_thread_start_and_close(store: Store) -> None:
    _add(store, "maya", 2)
    warmer = Warmer(store.warm_namespaces, store.warm_up)
    warmer.start()
    assert warmer.done.wait(30)
    warmer.close()
    assert len(store.lexical) == 1


def test_warmer_then_runs_after_every_namespace_and_before_done() -> None:
    events: list[object] = []
    warmer = Warmer(
        lambda: ["a", "b"],
        events.append,
        then=lambda: events.append(("then", warmer.done.is_set())),
    )
    warmer.run()
    assert events == ["a", "b", ("then", False)]
    assert warmer.done.is_set()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settle_heap_leaves_what_is_alive_out_of_later_collections() -> None:
    alive = _Cycle()
    try:
        settle_heap()
        # A collection walks the tracked objects; settled ones are no longer among them.
        assert not any(tracked is alive for tracked in gc.get_objects())
    finally:
        gc.unfreeze()  # this test process goes on collecting everything
    assert any(tracked is alive for tracked in gc.get_objects())


@pytest.mark.parametrize("settle", [True, False])
def test_a_serving_app_settles_its_heap_once_warm(store: Store, settle: bool) -> None:
    _add(store, "maya", 2)
    try:
        with TestClient(create_app(store, settle=settle)) as client:
            assert api_state(client.app).warmer.done.wait(30)  # type: ignore[arg-type]
            assert (gc.get_freeze_count() > 0) is settle
    finally:
        gc.unfreeze()
