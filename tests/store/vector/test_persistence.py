"""How often Chroma saves a collection's graph, and so how long its shared write-ahead log grows.

Chroma purges its log only up to the collection saved longest ago; with its default (a save
every 1,000 changes) a namespace of a few hundred memories is never saved, the log keeps every
vector written, and each write reads it (bench/results/chroma_sync.md).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import chromadb
from chromadb.config import Settings

from store.vector.chroma import HNSW_SYNC
from store.vector.compaction import DB_FILE
from store.vector.index import IndexItem, VectorIndex, collection_name
from tests.helpers.fake_embedder import FakeEmbedder


def items(start: int, count: int) -> list[IndexItem]:
    return [
        IndexItem(memory_id=n, version=1, text=f"memory {n} of the garden", fields={"type": "fact"})
        for n in range(start, start + count)
    ]


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
            for start in range(0, 3 * HNSW_SYNC, HNSW_SYNC // 2):  # writes of half a save each
                index.upsert(f"ns{n}", items(n * 1000 + start, HNSW_SYNC // 2))
        hits = index.query("ns3", index.embed_query("memory 3005 of the garden"), 1)
        assert hits[0].memory_id == 3005
        assert index.count("ns11") == 3 * HNSW_SYNC
    finally:
        index.close()
    # 720 vectors were written; with Chroma's default every one of them would still be there.
    assert log_length(tmp_path) <= 2 * HNSW_SYNC


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
