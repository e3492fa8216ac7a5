"""Tests of store.vector_index against embedded Chroma (tmp_path) and a real Chroma server."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from store import vector_index
from store.vector_index import (
    EmbedderMismatchError,
    IndexItem,
    VectorHit,
    VectorIndex,
    VectorIndexError,
    collection_name,
    plan_vectors,
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

    def open_(embedder: FakeEmbedder | None = None) -> VectorIndex:
        index = VectorIndex.open(embedder=embedder or FakeEmbedder(), **target)  # type: ignore[arg-type]
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


def _item(memory_id: int, text: str, *, version: int = 1, context: str | None = None) -> IndexItem:
    return IndexItem(memory_id=memory_id, version=version, text=text, context=context)


def _query(index: VectorIndex, ns: str, text: str, n: int = 100) -> list[VectorHit]:
    return index.query(ns, index.embed_query(text), n)


def _kinds(hits: list[VectorHit], memory_id: int) -> list[str]:
    return sorted(hit.kind for hit in hits if hit.memory_id == memory_id)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again on leaving the block: nothing listens there


# --- pure planning -----------------------------------------------------------------------------


def test_plan_vectors_single_sentence_only_full() -> None:
    vectors = plan_vectors(_item(7, "Likes green tea in the morning."))
    assert [(v.id, v.kind) for v in vectors] == [("7:full:0", "full")]


def test_plan_vectors_sentences_and_context_numbered_per_kind() -> None:
    item = _item(7, "Likes green tea a lot. Hates coffee with milk.", version=3, context="Drinks?")
    vectors = plan_vectors(item)
    assert [v.id for v in vectors] == ["7:full:0", "7:sent:0", "7:sent:1", "7:ctx:0"]
    assert vectors[-1].text == "Drinks?\nLikes green tea a lot. Hates coffee with milk."
    assert {v.version for v in vectors} == {3}


def test_collection_name_any_namespace_is_valid_chroma_name() -> None:
    name = collection_name("ünïcode / spaces & symbols!")
    assert name.startswith("mem_")
    assert len(name) == 28
    assert name.isalnum() or set(name) <= set("mem_0123456789abcdef")


# --- round trips -------------------------------------------------------------------------------


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
    assert hits[0].kind == "full"
    assert [hit.similarity for hit in hits] == sorted(
        (hit.similarity for hit in hits), reverse=True
    )


def test_query_identical_text_similarity_is_one(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea")])
    [hit] = _query(index, ns, "Alice likes green tea")
    assert (hit.memory_id, hit.kind) == (1, "full")
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= hit.similarity <= 1.0


def test_upsert_multi_sentence_adds_sent_vectors(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Alice likes green tea. She visits Kyoto every spring.")])
    hits = _query(index, ns, "Kyoto spring visit")
    assert _kinds(hits, 1) == ["full", "sent", "sent"]
    assert hits[0].kind == "sent"  # the sentence matches better than the whole text


def test_upsert_fewer_sentences_leaves_no_stale_vectors(index: VectorIndex, ns: str) -> None:
    index.upsert(
        ns, [_item(1, "One sentence is here. Another sentence follows. A third one ends.")]
    )
    index.upsert(ns, [_item(1, "Now just one sentence remains.", version=2)])
    hits = _query(index, ns, "sentence")
    assert _kinds(hits, 1) == ["full"]


def test_upsert_with_context_adds_ctx_vector(index: VectorIndex, ns: str) -> None:
    index.upsert(
        ns,
        [
            _item(1, "Yes, every single day", context="Do you walk the dog?"),
            _item(2, "Yes, every single day"),
        ],
    )
    hits = _query(index, ns, "walk the dog")
    assert _kinds(hits, 1) == ["ctx", "full"]
    assert _kinds(hits, 2) == ["full"]
    assert (hits[0].memory_id, hits[0].kind) == (1, "ctx")


def test_upsert_context_removed_drops_ctx_vector(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "Yes, every single day", context="Do you walk the dog?")])
    index.upsert(ns, [_item(1, "Yes, every single day", version=2)])
    assert _kinds(_query(index, ns, "walk the dog"), 1) == ["full"]


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
    assert len(embedder.calls) == 1
    assert len(embedder.calls[0]) == 20 * 3


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
    long_text = " ".join(f"Sentence number {i} of the long one." for i in range(6))
    items.append(_item(99, long_text))  # 7 vectors: more than a batch on its own
    index.upsert(ns, items)
    assert index.versions(ns) == {i: 1 for i in [*range(10), 99]}
    assert all(len(call) <= 4 for call in embedder.calls[:-1])
    assert _kinds(_query(index, ns, "long one"), 99) == ["full"] + ["sent"] * 6


def test_upsert_empty_items_creates_nothing(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [])
    assert ns not in index.namespaces()


# --- versions, delete, namespaces ------------------------------------------------------------


def test_versions_reflects_latest_upsert(index: VectorIndex, ns: str) -> None:
    index.upsert(ns, [_item(1, "first text", version=1), _item(2, "second text", version=4)])
    index.upsert(ns, [_item(1, "first text, edited. Now two sentences here.", version=2)])
    assert index.versions(ns) == {1: 2, 2: 4}


def test_versions_pages_through_large_namespace(
    index: VectorIndex, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_index, "_VERSIONS_PAGE", 3)
    index.upsert(ns, [_item(i, f"memory {i}", version=i + 10) for i in range(10)])
    assert index.versions(ns) == {i: i + 10 for i in range(10)}


def test_versions_missing_namespace_empty(index: VectorIndex, ns: str) -> None:
    assert index.versions(ns) == {}


def test_delete_removes_all_vectors_of_memory(index: VectorIndex, ns: str) -> None:
    index.upsert(
        ns,
        [
            _item(1, "Alice likes tea. She visits Kyoto often.", context="Hobbies?"),
            _item(2, "Bob likes tea too"),
        ],
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
