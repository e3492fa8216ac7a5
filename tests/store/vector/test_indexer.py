"""The indexer: one process writes the vector index at a time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from secretary.config import Settings
from store.coordination.leases import Lease
from store.service import Store
from store.vector import indexer as indexer_module
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path), create=True, embedder=FakeEmbedder())
    try:
        yield opened
    finally:
        opened.close()


def test_sync_while_another_process_writes_the_index_waits_then_leaves_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add_memories("ns", [{"content": "Maya went hiking."}], now=NOW)
    other = Lease(
        store.engine, holder="otherhost:1:abc", ttl=timedelta(minutes=5), name="index-sync"
    )
    other.acquire()
    monkeypatch.setattr(indexer_module, "SYNC_WAIT_SECONDS", 0.3)

    assert store.indexer.sync() == 0
    assert store.db.work.outbox_size() == 1  # left for the process that holds the lease

    other.release()
    assert store.indexer.sync() == 1
    assert store.indexer.verify("ns").clean


def test_sync_with_an_empty_outbox_takes_no_lease(store: Store) -> None:
    other = Lease(
        store.engine, holder="otherhost:1:abc", ttl=timedelta(minutes=5), name="index-sync"
    )
    other.acquire()

    assert store.indexer.sync() == 0  # nothing to do: no wait for the other writer


def test_sync_of_a_namespace_with_nothing_pending_asks_no_lease_whatever_others_wait(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job's run syncs its own namespace before it reads neighbours. Entries of other
    # namespaces (a bulk ingest not indexed yet) must neither make it queue for the index's
    # writer nor be walked to find that it has none.
    store.add_memories("other", [{"content": "Leo plays chess."}], now=NOW)
    asked: list[str] = []

    def take(lease: Lease, wait: float) -> bool:
        asked.append(lease.name)
        return False

    monkeypatch.setattr(indexer_module, "_take", take)

    assert not store.db.work.outbox_waiting("mine")
    assert store.db.work.outbox_waiting("other")
    assert store.indexer.sync(namespace="mine") == 0
    assert asked == []
    assert store.indexer.sync(wait=0, namespace="other") == 0  # its entries: it asks
    assert asked == ["index-sync"]
    assert store.db.work.outbox_size() == 1


def test_sync_of_one_namespace_applies_its_entries_and_leaves_the_others(store: Store) -> None:
    store.add_memories(
        "mine", [{"content": "Maya went hiking."}, {"content": "Maya cooks."}], now=NOW
    )
    store.add_memories("other", [{"content": "Leo plays chess."}], now=NOW)

    assert store.indexer.sync(wait=0, namespace="mine") == 2

    assert [entry.namespace for entry in store.db.work.outbox(limit=10)] == ["other"]
    assert store.indexer.verify("mine").clean
    assert store.index.count("other") == 0
    assert store.indexer.sync() == 1  # a full sync takes the rest
    assert store.indexer.verify("other").clean


def test_a_full_sync_applies_every_namespace_however_many_batches_it_takes(
    tmp_path: Path,
) -> None:
    # Batches of 2 over 3 namespaces: each batch holds several namespaces' entries, and the
    # next one must still read every namespace's (a loop variable once narrowed it to the
    # last namespace of the batch before, and the sync stopped with entries left).
    settings = Settings(data_dir=tmp_path)
    settings = settings.model_copy(
        update={"index": settings.index.model_copy(update={"batch_size": 2})}
    )
    store = Store.open(settings, create=True, embedder=FakeEmbedder())
    try:
        for name in ("a", "b", "c"):
            store.add_memories(
                name, [{"content": f"{name} one"}, {"content": f"{name} two"}], now=NOW
            )
        shuffled = [("b", "b three"), ("a", "a three"), ("c", "c three")]
        for name, text in shuffled:
            store.add_memories(name, [{"content": text}], now=NOW)

        assert store.indexer.sync() == 9

        assert store.db.work.outbox_size() == 0
        assert all(store.indexer.verify(name).clean for name in ("a", "b", "c"))
    finally:
        store.close()
