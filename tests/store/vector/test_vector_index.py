"""Tests of store.vector.index against embedded Chroma (tmp_path) and a real Chroma server."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from store.vector import index as vector_index
from store.vector.index import (
    LIVE,
    NEXT,
    OLD,
    EmbedderMismatchError,
    ForeignCollection,
    IncompatibleCollection,
    IndexItem,
    VectorHit,
    VectorIndex,
    VectorIndexError,
    collection_name,
)
from tests.conftest_chroma import ChromaServer
from tests.helpers.fake_embedder import FakeEmbedder

OpenIndex = Callable[..., VectorIndex]

BACKENDS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("http", id="http", marks=pytest.mark.chroma_server),
]


@pytest.fixture(params=BACKENDS)
def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenIndex]:
    """Open VectorIndexes on one target (embedded dir or the server); close them after."""
    if request.param == "http":
        target: dict[str, object] = {"url": request.getfixturevalue("chroma_server_url")}
    else:
        target = {"path": tmp_path / "chroma"}
    opened: list[VectorIndex] = []

    def open_(embedder: FakeEmbedder | None = None, store_id: str | None = None) -> VectorIndex:
        index = VectorIndex.open(  # type: ignore[arg-type]
            embedder=embedder or FakeEmbedder(), store_id=store_id, **target
        )
        opened.append(index)
        return index

    yield open_
    for index in opened:
        index.close()


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def index(open_index: OpenIndex, embedder: FakeEmbedder) -> VectorIndex:
    return open_index(embedder)


@pytest.fixture
def ns() -> str:
    """A fresh namespace (the server is shared by the session) with awkward characters."""
    return f"user/{uuid.uuid4().hex} Zoë's notes!"


def _item(memory_id: int, text: str, *, version: int = 1) -> IndexItem:
    return IndexItem(memory_id=memory_id, version=version, text=text)


def _query(index: VectorIndex, ns: str, text: str, n: int = 100) -> list[VectorHit]:
    return index.query(ns, index.embed_query(text), n)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again on leaving the block: nothing listens there


# --- names -------------------------------------------------------------------------------------


def test_collection_name_any_namespace_is_valid_chroma_name() -> None:
    name = collection_name("ünïcode / spaces & symbols!")
    assert name.startswith("mem_")
    assert len(name) == 28
    assert name.isalnum() or set(name) <= set("mem_0123456789abcdef")


# --- round trips -------------------------------------------------------------------------------


# --- whose collections -----------------------------------------------------------------------

MINE, THEIRS = "a" * 32, "b" * 32


def test_a_collection_of_another_store_is_refused_and_kept_as_it_was(
    open_index: OpenIndex, ns: str
) -> None:
    # Two stores on one Chroma server reach the same collection for a namespace name: the
    # second must not write over the first one's vector of memory 1 (nor read it as its own).
    mine = open_index(store_id=MINE)
    mine.upsert(ns, [_item(1, "Maya went hiking.")])
    theirs = open_index(store_id=THEIRS)

    with pytest.raises(IncompatibleCollection, match="of another store"):
        theirs.upsert(ns, [_item(1, "Leo plays chess.")])
    with pytest.raises(IncompatibleCollection, match="of another store"):
        _query(theirs, ns, "Leo plays chess.")

    hits = _query(mine, ns, "Maya went hiking.")
    assert [hit.memory_id for hit in hits] == [1]
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)


def test_a_collection_made_before_store_ids_is_used_by_any_store_and_taken_by_none(
    open_index: OpenIndex, ns: str
) -> None:
    # Whoever opens it first may be a staging copy: no store takes an old collection over;
    # its own store's next rebuild makes a collection that names it.
    legacy = open_index()  # no store id: as collections were made before migration 0012
    legacy.upsert(ns, [_item(1, "Maya went hiking.")])

    for store_id in (MINE, THEIRS, MINE):
        opened = open_index(store_id=store_id)
        assert [hit.memory_id for hit in _query(opened, ns, "Maya went hiking.")] == [1]
        assert opened.namespaces().count(ns) == 1
    rebuilt = open_index(store_id=MINE)
    rebuilt.prepare_next(ns)
    rebuilt.upsert(ns, [_item(1, "Maya went hiking.")], slots=(NEXT,))
    assert rebuilt.promote(ns)
    with pytest.raises(ForeignCollection):
        _query(open_index(store_id=THEIRS), ns, "Maya went hiking.")
    assert ns not in open_index(store_id=THEIRS).namespaces()


def test_query_after_upsert_nearest_memory_first(index: VectorIndex, ns: str) -> None:
    index.upsert(
        ns,
        [
            _item(1, "Alice likes green tea"),
            _item(2, "Bob plays the violin on weekends"),
            _item(3, "The car needs new tyres"),
        ],
    )
    hits = _query(index, ns, "who plays violin")
    assert hits[0].memory_id == 2
    assert sorted(hit.memory_id for hit in hits) == [1, 2, 3]  # one vector per memory
    assert [hit.similarity for hit in hits] == sorted(
        (hit.similarity for hit in hits), reverse=True
    )


def test_query_identical_text_similarity_is_one(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    [hit] = _query(index, ns, "Alice likes green tea")
    assert hit.memory_id == 1
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= hit.similarity <= 1.0


def test_upsert_multi_sentence_memory_is_one_vector(index: VectorIndex, ns: str) -> None:
    text = "Alice likes green tea. She visits Kyoto every spring."
    index.upsert(ns, [_item(1, text)])
    [hit] = _query(index, ns, "Kyoto spring visit")
    assert hit.memory_id == 1
    assert index.versions(ns) == {1: 1}


def test_upsert_new_version_replaces_vector(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "One sentence is here. Another sentence follows.")])
    index.upsert(ns, [_item(1, "Now just one sentence remains.", version=2)])
    [hit] = _query(index, ns, "Now just one sentence remains.")
    assert hit.memory_id == 1
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert index.versions(ns) == {1: 2}


def test_upsert_same_items_twice_is_idempotent(index: VectorIndex, ns: str) -> None:
    items = [_item(1, "Alice likes green tea. She visits Kyoto every spring.")]
    index.upsert(ns, items)
    first = _query(index, ns, "Kyoto")
    index.upsert(ns, items)
    assert _query(index, ns, "Kyoto") == first


def test_upsert_batch_embeds_in_one_call(
    index: VectorIndex, embedder: FakeEmbedder, ns: str
) -> None:
    items = [_item(i, f"Memory number {i} is here. It has two sentences.") for i in range(20)]
    index.upsert(ns, items)
    assert embedder.calls == [[item.text for item in items]]


def test_upsert_repeated_memory_id_last_wins(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "old text", version=1), _item(1, "new text", version=2)])
    assert index.versions(ns) == {1: 2}
    [hit] = _query(index, ns, "new text")
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)


def test_upsert_over_max_batch_size_chunks_and_keeps_all(
    index: VectorIndex, embedder: FakeEmbedder, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "_max_batch", 4)
    items = [_item(i, f"Memory {i} first part. Memory {i} second part.") for i in range(10)]
    index.upsert(ns, items)
    assert index.versions(ns) == {i: 1 for i in range(10)}
    assert [len(call) for call in embedder.calls] == [4, 4, 2]


def test_upsert_empty_items_creates_nothing(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [])
    assert ns not in index.namespaces()


# --- versions, delete, namespaces ------------------------------------------------------------


def test_versions_reflects_latest_upsert(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "first text", version=1), _item(2, "second text", version=4)])
    index.upsert(ns, [_item(1, "first text, edited", version=2)])
    assert index.versions(ns) == {1: 2, 2: 4}


def test_versions_pages_through_large_namespace(
    index: VectorIndex, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_index, "_VERSIONS_PAGE", 3)
    index.upsert(ns, [_item(i, f"memory {i}", version=i + 10) for i in range(10)])
    assert index.versions(ns) == {i: i + 10 for i in range(10)}


def test_versions_missing_namespace_empty(index: VectorIndex, ns: str) -> None:
    assert index.versions(ns) == {}


def test_delete_removes_vector_of_memory(index: VectorIndex, ns: str) -> None:
    index.upsert(
        ns, [_item(1, "Alice likes tea. She visits Kyoto often."), _item(2, "Bob likes tea")]
    )
    index.delete(ns, [1])
    hits = _query(index, ns, "tea")
    assert {hit.memory_id for hit in hits} == {2}
    assert index.versions(ns) == {2: 1}


def test_delete_twice_and_unknown_ids_is_noop(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes tea"), _item(2, "Bob likes tea")])
    index.delete(ns, [1, 404])
    index.delete(ns, [1, 404])
    index.delete(ns, [])
    assert index.versions(ns) == {2: 1}


def test_delete_missing_namespace_is_noop(index: VectorIndex, ns: str) -> None:
    index.delete(ns, [1, 2])
    assert ns not in index.namespaces()


def test_query_other_namespace_never_returned(index: VectorIndex, ns: str) -> None:
    other = ns + " (other)"
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    index.upsert(other, [_item(2, "Alice likes green tea"), _item(3, "green tea")])
    assert {hit.memory_id for hit in _query(index, ns, "green tea")} == {1}
    assert {hit.memory_id for hit in _query(index, other, "green tea")} == {2, 3}


def test_query_missing_namespace_returns_empty(index: VectorIndex, ns: str) -> None:
    assert _query(index, ns, "anything") == []


def test_query_emptied_namespace_returns_empty(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    index.delete(ns, [1])
    assert _query(index, ns, "green tea") == []


def test_query_zero_n_returns_empty(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    assert _query(index, ns, "green tea", n=0) == []


def test_query_wrong_dimension_raises_value_error(index: VectorIndex, ns: str) -> None:
    with pytest.raises(ValueError, match="shape"):
        index.query(ns, np.ones(10, dtype=np.float32), 5)


def test_embed_query_returns_vector_of_dim(index: VectorIndex, embedder: FakeEmbedder) -> None:
    vector = index.embed_query("hello")
    assert vector.shape == (embedder.dim,)
    assert vector.dtype == np.float32


def test_namespaces_lists_created_and_drop_removes(index: VectorIndex, ns: str) -> None:
    other = ns + " (other)"
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    index.upsert(other, [_item(1, "Bob likes coffee")])
    assert {ns, other} <= set(index.namespaces())
    index.drop(ns)
    assert ns not in index.namespaces()
    assert other in index.namespaces()
    assert _query(index, ns, "green tea") == []


def test_drop_missing_namespace_is_noop(index: VectorIndex, ns: str) -> None:
    index.drop(ns)
    index.drop(ns)


def test_upsert_after_drop_recreates_collection(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    index.drop(ns)
    index.upsert(ns, [_item(2, "Bob likes coffee")])
    assert index.versions(ns) == {2: 1}


def test_query_collection_dropped_elsewhere_returns_empty(open_index: OpenIndex, ns: str) -> None:
    reader, other = open_index(), open_index()
    reader.upsert(ns, [_item(1, "Alice likes green tea")])
    assert _query(reader, ns, "green tea")  # caches the collection
    other.drop(ns)
    assert _query(reader, ns, "green tea") == []
    reader.upsert(ns, [_item(2, "Bob likes coffee")])
    assert {hit.memory_id for hit in _query(other, ns, "coffee")} == {2}


# --- embedder mismatch -------------------------------------------------------------------------


def test_open_collection_other_model_id_raises_mismatch(open_index: OpenIndex, ns: str) -> None:
    open_index(FakeEmbedder(model_id="fake:a")).upsert(ns, [_item(1, "Alice likes tea")])
    other = open_index(FakeEmbedder(model_id="fake:b"))
    with pytest.raises(EmbedderMismatchError, match=r"fake:a \(dim 384\).*fake:b \(dim 384\)"):
        _query(other, ns, "tea")
    with pytest.raises(EmbedderMismatchError):
        other.upsert(ns, [_item(2, "Bob likes tea")])


def test_open_collection_other_dim_raises_mismatch(open_index: OpenIndex, ns: str) -> None:
    open_index(FakeEmbedder(model_id="fake:a", dim=384)).upsert(ns, [_item(1, "Alice")])
    other = open_index(FakeEmbedder(model_id="fake:a", dim=128))
    with pytest.raises(EmbedderMismatchError, match="dim 128"):
        other.versions(ns)


def test_upsert_mismatched_embedder_does_not_embed(open_index: OpenIndex, ns: str) -> None:
    open_index(FakeEmbedder(model_id="fake:a")).upsert(ns, [_item(1, "Alice likes tea")])
    embedder_b = FakeEmbedder(model_id="fake:b")
    with pytest.raises(EmbedderMismatchError):
        open_index(embedder_b).upsert(ns, [_item(2, "Bob likes tea")])
    assert embedder_b.calls == []


def test_open_collection_of_older_layout_refused_until_rebuilt(
    open_index: OpenIndex, ns: str
) -> None:
    index = open_index()
    index.upsert(ns, [_item(1, "Alice likes tea")])
    collection = index._collection(ns, create=False)
    assert collection is not None
    # An index written by an older version: several vectors per memory, no layout key.
    metadata = {k: v for k, v in (collection.metadata or {}).items() if k != "layout"}
    collection.modify(metadata=metadata)
    reader = open_index()
    with pytest.raises(VectorIndexError, match=r"another layout.*rebuild"):
        reader.versions(ns)
    reader.drop(ns)  # what `secretary index rebuild` does first
    reader.upsert(ns, [_item(1, "Alice likes tea")])
    assert reader.versions(ns) == {1: 1}


# --- opening and failures ----------------------------------------------------------------------


def test_open_closed_port_raises_quickly_naming_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(VectorIndexError, match=url):
        VectorIndex.open(embedder=FakeEmbedder(), url=url, timeout=2.0)
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1:8000", "http://", "http://host:port", "http://h/x"]
)
def test_open_invalid_url_raises(url: str) -> None:
    with pytest.raises(VectorIndexError, match="invalid Chroma url"):
        VectorIndex.open(embedder=FakeEmbedder(), url=url)


def test_open_no_target_raises() -> None:
    with pytest.raises(VectorIndexError, match="path or url"):
        VectorIndex.open(embedder=FakeEmbedder())


def test_open_path_is_a_file_raises_naming_path(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    with pytest.raises(VectorIndexError, match="not-a-dir"):
        VectorIndex.open(embedder=FakeEmbedder(), path=path)


@pytest.mark.chroma_server
def test_query_server_stopped_raises_naming_server(
    dedicated_chroma_server: ChromaServer, ns: str
) -> None:
    url = dedicated_chroma_server.url
    index = VectorIndex.open(embedder=FakeEmbedder(), url=url, timeout=2.0)
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    assert _query(index, ns, "green tea")
    dedicated_chroma_server.stop()
    started = time.monotonic()
    with pytest.raises(VectorIndexError, match=f"cannot reach the Chroma server at {url}"):
        _query(index, ns, "green tea")
    with pytest.raises(VectorIndexError, match=url):
        index.upsert(ns, [_item(2, "Bob likes coffee")])
    assert time.monotonic() - started < 5.0


@pytest.mark.chroma_server
def test_ping_stopped_server_raises_naming_server(dedicated_chroma_server: ChromaServer) -> None:
    url = dedicated_chroma_server.url
    index = VectorIndex.open(embedder=FakeEmbedder(), url=url, timeout=2.0)
    index.ping()
    dedicated_chroma_server.stop()
    with pytest.raises(VectorIndexError, match=f"cannot reach the Chroma server at {url}"):
        index.ping()


# --- a rebuild's second collection -------------------------------------------------------------


def test_promote_puts_the_rebuilt_collection_in_place(open_index: OpenIndex, ns: str) -> None:
    index, reader = open_index(), open_index()
    index.upsert(ns, [_item(1, "Alice likes green tea"), _item(2, "Bob likes coffee")])
    assert _query(reader, ns, "coffee")  # the reader caches the collection in place
    assert index.prepare_next(ns) is False  # made
    assert index.prepare_next(ns) is True  # found: a rebuild resumes
    index.upsert(ns, [_item(1, "Alice likes green tea", version=2)], slots=(NEXT,))
    assert index.versions(ns) == {1: 1, 2: 1}  # searches keep the old one meanwhile

    index.promote(ns)

    assert index.versions(ns) == {1: 2}
    assert {hit.memory_id for hit in _query(reader, ns, "coffee")} == {1}  # it follows
    names = {collection.name for collection in index._client.list_collections()}
    assert collection_name(ns, NEXT) not in names
    assert collection_name(ns, OLD) not in names
    assert index.namespaces().count(ns) == 1
    index.promote(ns)  # nothing left to do
    assert index.versions(ns) == {1: 2}


def test_promote_cut_short_after_moving_the_old_one_aside_is_finished_by_the_next(
    open_index: OpenIndex, ns: str
) -> None:
    index = open_index()
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    index.prepare_next(ns)
    index.upsert(ns, [_item(2, "Bob likes coffee")], slots=(NEXT,))
    replaced = index._lookup(collection_name(ns))
    assert replaced is not None
    replaced.modify(name=collection_name(ns, OLD))  # promote's first step; then a crash

    open_index().promote(ns)

    assert open_index().versions(ns) == {2: 1}
    names = {collection.name for collection in index._client.list_collections()}
    assert collection_name(ns, OLD) not in names


def test_prepare_next_filled_by_another_embedder_starts_over(
    open_index: OpenIndex, ns: str
) -> None:
    first = open_index(FakeEmbedder(model_id="fake:a"))
    first.prepare_next(ns)
    first.upsert(ns, [_item(1, "Alice likes tea")], slots=(NEXT,))
    other = open_index(FakeEmbedder(model_id="fake:b"))

    assert other.prepare_next(ns) is False

    other.promote(ns)
    assert other.versions(ns) == {}


def test_writable_only_an_existing_collection_of_this_embedder(
    open_index: OpenIndex, ns: str
) -> None:
    index = open_index(FakeEmbedder(model_id="fake:a"))
    assert not index.writable(ns, LIVE)
    index.upsert(ns, [_item(1, "Alice likes tea")])
    assert index.writable(ns, LIVE)
    assert not index.writable(ns, NEXT)
    assert not open_index(FakeEmbedder(model_id="fake:b")).writable(ns, LIVE)


def test_upsert_into_a_rebuild_collection_dropped_elsewhere_raises(
    open_index: OpenIndex, ns: str
) -> None:
    index = open_index()
    index.prepare_next(ns)
    open_index().drop(ns, NEXT)
    with pytest.raises(VectorIndexError, match="is gone"):
        index.upsert(ns, [_item(1, "Alice likes tea")], slots=(NEXT,))
    index.delete(ns, [1], slots=(NEXT,))  # nothing to delete there: fine


def test_count_is_the_live_collection_s_vectors(index: VectorIndex, ns: str) -> None:
    assert index.count(ns) == 0
    index.upsert(ns, [_item(1, "Alice likes tea"), _item(2, "Bob likes coffee")])
    index.prepare_next(ns)
    index.upsert(ns, [_item(3, "Carol likes cocoa")], slots=(NEXT,))
    assert index.count(ns) == 2


def test_query_many_answers_what_one_query_each_answers(
    index: VectorIndex, embedder: FakeEmbedder
) -> None:
    texts = ["tea in the morning", "a hike with Tom", "the train to work", "tea with Tom"]
    index.upsert(
        "maya", [IndexItem(memory_id=i + 1, version=1, text=t) for i, t in enumerate(texts)]
    )
    vectors = list(embedder.embed(["tea", "hike with Tom", "work"]))
    many = index.query_many("maya", vectors, 3)
    assert many == [index.query("maya", vector, 3) for vector in vectors]
    assert [len(hits) for hits in many] == [3, 3, 3]
    assert index.query_many("nobody", vectors, 3) == [[], [], []]
    assert index.query_many("maya", [], 3) == []


def test_the_collections_kept_are_bounded_and_an_evicted_one_still_answers(
    open_index: OpenIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A daemon dreaming 10,000 namespaces kept a collection handle for each; it keeps the
    # last COLLECTIONS_KEPT used, and one evicted is looked up again when next used.
    monkeypatch.setattr(vector_index, "COLLECTIONS_KEPT", 3)
    index = open_index()
    names = [f"lru-{uuid.uuid4().hex[:8]}-{n}" for n in range(5)]
    for number, name in enumerate(names):
        index.upsert(name, [_item(number + 1, f"memory of namespace {number}")])

    assert len(index._collections) == 3  # what the process holds
    assert [hit.memory_id for hit in _query(index, names[0], "memory of namespace 0")] == [1]
    assert len(index._collections) == 3
