"""How often Chroma saves a collection's graph, and so how long its shared write-ahead log grows.

Chroma purges its log only up to the collection saved longest ago; with its default (a save
every 1,000 changes) a namespace of a few hundred memories is never saved, the log keeps every
vector written, and each write reads it (bench/results/chroma_sync.md).
"""

from __future__ import annotations

import resource
import sqlite3
from contextlib import closing
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings

from store.vector import chroma
from store.vector.chroma import HNSW_SYNC
from store.vector.compaction import DB_FILE
from store.vector.index import IndexItem, VectorIndex, collection_name
from tests.conftest_chroma import ChromaServerError, start_chroma_server
from tests.helpers.fake_embedder import FakeEmbedder


def items(start: int, count: int) -> list[IndexItem]:
    return [
        IndexItem(memory_id=n, version=1, text=f"memory {n} of the garden", fields={"type": "fact"})
        for n in range(start, start + count)
    ]


def vector_of(index: VectorIndex, memory_id: int) -> np.ndarray:
    return index.embed_query(f"memory {memory_id} of the garden")


def log_length(root: Path) -> int:
    # Read only after the index is closed (two SQLite libraries in one process; see compaction).
    with closing(sqlite3.connect(root / DB_FILE)) as db:
        return int(db.execute("SELECT count(*) FROM embeddings_queue").fetchone()[0])


def sync_threshold(root: Path, namespace: str) -> int:
    client = chromadb.PersistentClient(path=root, settings=Settings(anonymized_telemetry=False))
    try:
        hnsw = client.get_collection(collection_name(namespace)).configuration["hnsw"]
        return int(hnsw["sync_threshold"])  # type: ignore[index]
    finally:
        client.close()


def test_many_small_namespaces_leave_a_short_log_and_search_as_before(tmp_path: Path) -> None:
    index = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    try:
        for n in range(12):
            for start in range(0, 60, 10):
                index.upsert(f"ns{n}", items(n * 1000 + start, 10))
        hits = index.query("ns3", index.embed_query("memory 3005 of the garden"), 1)
        assert hits[0].memory_id == 3005
        assert index.count("ns11") == 60
    finally:
        index.close()
    # 720 vectors were written; with Chroma's default every one of them would still be there.
    assert log_length(tmp_path) <= 12 * 10 * HNSW_SYNC


# chromadb 1.5 splits the graphs it keeps over 64 shards by a hash of the segment's random id,
# each shard keeping (the number kept // 64) graphs but at least one: below 128 kept, a graph is
# let go only when another namespace's lands in its shard. More namespaces than shards make
# that certain (pigeonhole) whatever the ids; 12 left it to chance.
GRAPH_SHARDS = 64
NAMESPACES = GRAPH_SHARDS + 16


def assert_every_vector_found_after_graphs_let_go(index: VectorIndex) -> None:
    """chromadb 1.5 keeps a bounded number of collection graphs in memory and, reading one
    again from disk, has none of the entries written since it was last saved: a graph saved at
    every write loses none (HNSW_SYNC), whatever the namespaces' sizes."""

    def size(n: int) -> int:  # 2 to 12 vectors, written in two upserts
        return 2 + 2 * (n % 6)

    try:
        for n in range(NAMESPACES):
            index.upsert(f"ns{n}", items(n * 1000, size(n) - 1))
            index.upsert(f"ns{n}", items(n * 1000 + size(n) - 1, 1))
        for _ in range(2):  # the second round reads back graphs let go in the first
            missed = [
                (n, m)
                for n in range(NAMESPACES)
                for m in range(n * 1000, n * 1000 + size(n))
                if m not in {h.memory_id for h in index.query(f"ns{n}", vector_of(index, m), 12)}
            ]
            assert missed == []
    finally:
        index.close()


def test_every_vector_is_found_after_an_embedded_chroma_let_go_of_its_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chroma, "EMBEDDED_GRAPHS_KEPT", 4)
    index = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    assert index._client._server.hnsw_cache_size == 4  # type: ignore[attr-defined]
    assert_every_vector_found_after_graphs_let_go(index)


@pytest.mark.chroma_server
def test_every_vector_is_found_after_a_chroma_server_let_go_of_its_graph(
    tmp_path: Path,
) -> None:
    try:
        server = start_chroma_server(tmp_path, graphs_kept=4)
    except ChromaServerError as exc:
        pytest.skip(str(exc))
    try:
        index = VectorIndex.open(embedder=FakeEmbedder(), url=server.url)
        assert_every_vector_found_after_graphs_let_go(index)
    finally:
        server.stop()


def test_a_collection_made_with_chromas_default_is_changed_when_opened(tmp_path: Path) -> None:
    index = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    try:
        index.upsert("older", items(1, 3))
    finally:
        index.close()
    client = chromadb.PersistentClient(path=tmp_path, settings=Settings(anonymized_telemetry=False))
    try:  # as a collection made before HNSW_SYNC was set, or by another program
        client.get_collection(collection_name("older")).modify(
            configuration={"hnsw": {"sync_threshold": 1000, "batch_size": 100}}
        )
    finally:
        client.close()
    assert sync_threshold(tmp_path, "older") == 1000

    index = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    try:
        assert index.count("older") == 3
    finally:
        index.close()
    assert sync_threshold(tmp_path, "older") == HNSW_SYNC


def test_an_embedded_chroma_keeps_a_bounded_number_of_graphs(tmp_path: Path) -> None:
    # chromadb's own default is its open-file limit / 5 (4,000 at 20,000): gigabytes.
    index = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    try:
        kept = index._client._server.hnsw_cache_size  # type: ignore[attr-defined]
    finally:
        index.close()
    assert kept == min(
        chroma.EMBEDDED_GRAPHS_KEPT, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 5
    )
