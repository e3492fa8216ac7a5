"""Rebuilding the vector index through SQL: recorded before Chroma is touched, filled into a
second collection while searches keep the first, resumed where it stopped, and reported as
incomplete until the new collection is in place."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from secretary.config import Settings
from store.coordination.leases import Lease
from store.errors import IndexBusy
from store.requests import search_request
from store.service import Store
from store.settings import DatabaseSettings
from store.vector import indexer as indexer_module
from store.vector.index import NEXT, OLD, VectorIndex, VectorIndexError, collection_name
from tests.helpers.fake_embedder import FakeEmbedder

NS = "maya"
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def open_store(engine: Engine, data_dir: Path, embedder: FakeEmbedder | None = None) -> Store:
    settings = Settings(
        data_dir=data_dir,
        database=DatabaseSettings(url=engine.url.render_as_string(hide_password=False)),
        # Small batches, so that a rebuild of a few memories takes several.
        index=Settings().index.model_copy(update={"batch_size": 2}),
    )
    return Store.open(settings, embedder=embedder or FakeEmbedder())


@pytest.fixture
def store(engine: Engine, tmp_path: Path) -> Iterator[Store]:
    opened = open_store(engine, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


def seed(store: Store, count: int = 7) -> list[int]:
    items = [
        {"content": f"Maya's memory number {n} about hiking", "timestamp": f"2026-01-{n + 1:02d}"}
        for n in range(count)
    ]
    ids = store.add_memories(NS, items, now=NOW).ids
    store.indexer.sync()
    return list(ids)


def degraded(store: Store) -> tuple[str, ...]:
    request = search_request(namespace=NS, query="hiking memory", k=5, reinforce=False)
    return store.search(request, now=NOW).degraded


def names(index: VectorIndex) -> set[str]:
    return {collection.name for collection in index._client.list_collections()}


def test_rebuild_repairs_drift_and_leaves_only_the_new_collection(store: Store) -> None:
    seed(store)
    store.index.delete(NS, [1, 2])

    assert store.indexer.rebuild(NS) == 7

    assert store.indexer.verify(NS).clean
    assert store.indexer.pending_rebuilds() == {}
    assert collection_name(NS, NEXT) not in names(store.index)
    assert collection_name(NS, OLD) not in names(store.index)
    assert degraded(store) == ()


def test_rebuild_cut_short_keeps_the_old_index_says_so_and_sync_completes_it(
    store: Store,
) -> None:
    seed(store)
    store.indexer.request_rebuild([NS])
    assert degraded(store) == (
        "vector index rebuild pending (0 of 7 memories copied): vector results come from the "
        "index being replaced and may be incomplete",
    )

    assert store.indexer.sync(limit=4) == 4  # two batches copied; then the process stops

    mark = store.indexer.pending_rebuilds()[NS]
    assert (mark.phase, mark.after_id, mark.copied, mark.total) == ("copying", 4, 4, 7)
    assert store.indexer.verify(NS).clean  # searches still use the whole old index
    assert store.db.work.outbox_size() == 0  # nothing in the outbox says what is missing...
    store.index_status.refresh()
    assert "rebuild pending (4 of 7" in degraded(store)[0]  # ...the rebuild's row does

    assert store.indexer.sync() == 3

    assert store.indexer.verify(NS).clean
    assert store.indexer.pending_rebuilds() == {}
    assert degraded(store) == ()


def test_changes_made_during_a_rebuild_reach_both_collections(store: Store) -> None:
    seed(store)
    store.indexer.request_rebuild([NS])
    store.indexer.sync(limit=4)  # memories 1-4 copied
    store.edit(NS, 1, {"content": "Maya hiked the Alps"}, now=NOW)  # copied already
    store.delete(NS, 2, now=NOW)  # copied already
    store.edit(NS, 6, {"content": "Maya hiked in Norway"}, now=NOW)  # not copied yet
    (added,) = store.add_memories(NS, [{"content": "Maya hiked Snowdon"}], now=NOW).ids

    store.indexer.sync(limit=2)  # one more batch, and a batch of the outbox meanwhile

    assert store.indexer.pending_rebuilds()[NS].copied == 6
    assert store.db.work.outbox_size() == 2
    held = store.index.versions(NS)  # the collection in place stays current
    assert (held[1], 2 in held) == (2, False)
    store.indexer.sync()
    assert store.indexer.pending_rebuilds() == {}
    drift = store.indexer.verify(NS)
    assert drift.clean, drift  # and the new one missed nothing
    assert set(store.index.versions(NS)) == {1, 3, 4, 5, 6, 7, added}
    assert store.index.versions(NS)[1] == 2


def test_rebuild_whose_new_collection_was_lost_starts_over(store: Store) -> None:
    seed(store)
    store.indexer.request_rebuild([NS])
    store.indexer.sync(limit=4)
    VectorIndex(store.index._client, FakeEmbedder()).drop(NS, NEXT)  # e.g. a server wiped

    assert store.indexer.sync() == 7

    assert store.indexer.verify(NS).clean
    assert store.indexer.pending_rebuilds() == {}


def test_rebuild_replaces_a_collection_another_embedder_filled(
    engine: Engine, tmp_path: Path
) -> None:
    old = open_store(engine, tmp_path, FakeEmbedder(model_id="fake:old"))
    seed(old)
    old.close()
    new = open_store(engine, tmp_path, FakeEmbedder(model_id="fake:new"))
    try:
        assert "rebuild the vector index" in degraded(new)[0]
        new.add_memories(NS, [{"content": "Maya hiked Snowdon"}], now=NOW)
        new.indexer.request_rebuild([NS])
        new.indexer.sync(limit=2)  # the outbox skips the old collection: it cannot take it

        new.indexer.sync()

        assert new.indexer.verify(NS).clean
        new.searcher._vector_failure = None  # the old collection's failure, remembered 30 s
        assert degraded(new) == ()
    finally:
        new.close()


def test_promotion_cut_short_is_finished_by_the_next_sync(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(store)

    def move_aside_then_fail(namespace: str) -> None:
        replaced = store.index._lookup(collection_name(namespace))
        assert replaced is not None
        replaced.modify(name=collection_name(namespace, OLD))
        raise VectorIndexError("the server went away")

    with monkeypatch.context() as patched:
        patched.setattr(store.index, "promote", move_aside_then_fail)
        with pytest.raises(VectorIndexError):
            store.indexer.rebuild(NS)
    assert store.indexer.pending_rebuilds()[NS].phase == "promoting"
    store.index_status.refresh()
    assert "rebuild pending (7 of 7" in degraded(store)[0]

    store.indexer.sync()

    assert store.indexer.verify(NS).clean
    assert store.indexer.pending_rebuilds() == {}


def test_asking_again_for_a_pending_rebuild_resumes_it(store: Store) -> None:
    seed(store)
    store.indexer.request_rebuild([NS])
    store.indexer.sync(limit=4)

    assert store.indexer.rebuild(NS) == 3  # the rest only

    assert store.indexer.verify(NS).clean


def test_rebuild_while_another_process_writes_the_index_is_recorded_for_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(store)
    other = Lease(
        store.engine, holder="otherhost:1:abc", ttl=timedelta(minutes=5), name="index-sync"
    )
    other.acquire()
    monkeypatch.setattr(indexer_module, "SYNC_WAIT_SECONDS", 0.3)

    with pytest.raises(IndexBusy, match="the rebuild of 'maya' is recorded"):
        store.indexer.rebuild(NS)

    assert NS in store.indexer.pending_rebuilds()
    other.release()
    store.indexer.sync()
    assert store.indexer.pending_rebuilds() == {}
