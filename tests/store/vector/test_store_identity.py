"""Two stores pointed at one Chroma server: the second is refused, the first keeps its vectors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from secretary.config import Settings
from store.coordination.identity import store_id
from store.service import Store
from store.vector.index import IncompatibleCollection
from tests.conftest_chroma import ChromaServer
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def open_store(data_dir: Path, chroma_url: str = "") -> Store:
    index = Settings().index.model_copy(update={"chroma_url": chroma_url})
    return Store.open(
        Settings(data_dir=data_dir, index=index), create=True, embedder=FakeEmbedder()
    )


def test_every_store_has_an_id_of_its_own(tmp_path: Path) -> None:
    first, second = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    try:
        assert len(store_id(first.engine)) == 32
        assert store_id(first.engine) != store_id(second.engine)
        again = open_store(tmp_path / "a")  # opening (and upgrading) again keeps it
        assert store_id(again.engine) == store_id(first.engine)
        again.close()
    finally:
        first.close()
        second.close()


def assert_holds_its_own(store: Store, memory_id: int) -> None:
    """The store's vector of "Maya went hiking." (``memory_id``) is still its own."""
    hits = store.index.query("default", store.index.embed_query("Maya went hiking."), 5)
    assert [hit.memory_id for hit in hits] == [memory_id]
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)


@pytest.fixture
def two_stores(
    dedicated_chroma_server: ChromaServer, tmp_path: Path
) -> Iterator[tuple[Store, Store]]:
    """Two stores (each its own SQLite and id) pointed at one Chroma server."""
    first = open_store(tmp_path / "first", dedicated_chroma_server.url)
    second = open_store(tmp_path / "second", dedicated_chroma_server.url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


@pytest.mark.chroma_server
def test_a_second_store_on_the_same_chroma_server_is_refused_and_loses_nothing(
    two_stores: tuple[Store, Store],
) -> None:
    first, second = two_stores
    (mine,) = first.add_memories("default", [{"content": "Maya went hiking."}], now=NOW).ids
    assert first.indexer.sync() == 1
    (theirs,) = second.add_memories("default", [{"content": "Leo plays chess."}], now=NOW).ids
    assert theirs == mine  # the same memory id in both stores: the vector they would share

    with pytest.raises(IncompatibleCollection, match="of another store"):
        second.indexer.sync()

    assert second.db.work.outbox_size() == 1  # kept for an index of its own
    assert first.indexer.verify("default").clean
    assert_holds_its_own(first, mine)


@pytest.mark.chroma_server
def test_a_second_stores_rebuild_leaves_the_first_ones_collections_alone(
    two_stores: tuple[Store, Store],
) -> None:
    # `secretary index rebuild` rebuilds every namespace the store and the server know; the
    # server's collections of another store are neither listed, replaced, renamed nor dropped.
    first, second = two_stores
    (mine,) = first.add_memories("default", [{"content": "Maya went hiking."}], now=NOW).ids
    first.add_memories("elsewhere", [{"content": "Maya cooks."}], now=NOW)
    assert first.indexer.sync() == 2
    second.add_memories("default", [{"content": "Leo plays chess."}], now=NOW)

    assert second.indexer.namespaces() == ["default"]  # not "elsewhere": first's alone
    with pytest.raises(IncompatibleCollection, match="of another store"):
        second.indexer.rebuild("default")

    for namespace in ("default", "elsewhere"):
        assert first.indexer.verify(namespace).clean
    assert_holds_its_own(first, mine)


@pytest.mark.chroma_server
def test_a_refused_namespace_keeps_its_changes_and_holds_back_no_other(
    two_stores: tuple[Store, Store],
) -> None:
    first, second = two_stores
    first.add_memories("default", [{"content": "Maya went hiking."}], now=NOW)
    assert first.indexer.sync() == 1
    # The second store's oldest entries are refused; those after them are its own.
    second.add_memories("default", [{"content": "Leo plays chess."}], now=NOW)
    second.add_memories("own", [{"content": "Leo paints."}, {"content": "Leo runs."}], now=NOW)

    with pytest.raises(IncompatibleCollection, match="of another store"):
        second.indexer.sync()

    assert second.indexer.verify("own").clean
    assert second.db.work.outbox_waiting("default")
    assert second.db.work.outbox_size() == 1
    assert first.indexer.verify("default").clean
