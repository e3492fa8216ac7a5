"""Compacting an embedded Chroma: the log entries a delete superseded and the dropped
collections' directories go, the file is rewritten, the HNSW files' unused slots are zeroed, and
Chroma opened again holds the same index as before (its log replayed over what its HNSW files
saved)."""

from __future__ import annotations

import sqlite3
import struct
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import chromadb
import pytest
from chromadb.api.collection_configuration import CreateCollectionConfiguration
from chromadb.config import Settings

import store.vector.index as vector_index
from store.vector.compaction import DB_FILE, Compacted, CompactionFailed, compact
from store.vector.index import IndexItem, VectorIndex
from store.vector.segments import scrub, segment_dirs
from tests.helpers.fake_embedder import FakeEmbedder

NS = "ns"
SECRET = b"Pellucidor"


def item(memory_id: int, *, secret: bool = False) -> IndexItem:
    tags = ["kept", SECRET.decode()] if secret else ["kept"]
    return IndexItem(
        memory_id=memory_id,
        version=1,
        text=f"memory {memory_id} about the garden",
        fields={"type": "fact", "tags": tags},
    )


@pytest.fixture
def index(tmp_path: Path) -> Iterator[VectorIndex]:
    opened = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    yield opened
    opened.close()


def holding(root: Path, needle: bytes) -> list[str]:
    files = (p for p in root.rglob("*") if p.is_file())
    return sorted(str(p.relative_to(root)) for p in files if needle in p.read_bytes())


def searches(index: VectorIndex) -> list[tuple[int, list[float]]]:
    """Each query's top hit and the similarities of its nearest five (the others tie)."""
    found = []
    for memory_id in (7, 12, 20, 28):
        hits = index.query(NS, index.embed_query(f"memory {memory_id} about the garden"), 5)
        found.append((hits[0].memory_id, [round(hit.similarity, 5) for hit in hits]))
    return found


def queue_rows(root: Path) -> list[tuple[str, int]]:
    # Read only after the index is closed: two SQLite libraries in one process must not share
    # an open file (see store.vector.compaction).
    with closing(sqlite3.connect(root / DB_FILE)) as db:
        return db.execute("SELECT id, operation FROM embeddings_queue ORDER BY seq_id").fetchall()


@pytest.fixture
def saved_rarely(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collections as Chroma makes them by default (their graph saved every 1,000 changes), as
    in stores made before ``store.vector.chroma.HNSW_SYNC``: the log keeps what they were sent."""
    monkeypatch.setattr(vector_index, "COLLECTION_CONFIGURATION", {"hnsw": {"space": "cosine"}})
    monkeypatch.setattr(vector_index, "persists_often", lambda collection: True)


@pytest.mark.usefixtures("saved_rarely")
def test_compact_drops_what_deletes_superseded_and_reopened_chroma_holds_the_same(
    index: VectorIndex, tmp_path: Path
) -> None:
    index.upsert(NS, [item(n, secret=n in (5, 10, 15)) for n in range(1, 31)])
    index.upsert(NS, [item(n) for n in range(1, 4)])  # a second version of some
    index.delete(NS, [5, 10, 15])
    before = index.versions(NS)
    nearest = searches(index)
    assert holding(tmp_path, SECRET) == [DB_FILE]

    compacted = compact(tmp_path)

    assert compacted.superseded == 3
    assert holding(tmp_path, SECRET) == []
    assert index.versions(NS) == before  # the open client goes on as it was
    index.close()
    rows = queue_rows(tmp_path)
    assert {memory_id for memory_id, _ in rows if memory_id in {"5", "10", "15"}} == {
        "5",
        "10",
        "15",
    }
    assert all(operation == 3 for memory_id, operation in rows if memory_id in {"5", "10", "15"})

    reopened = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    try:
        assert reopened.versions(NS) == before
        assert reopened.held(NS, [5, 10, 15, 20]) == [20]
        assert searches(reopened) == nearest  # rebuilt from the log alone: never saved yet
    finally:
        reopened.close()


def test_compact_removes_the_directories_of_dropped_collections(
    index: VectorIndex, tmp_path: Path
) -> None:
    index.upsert("kept", [item(n) for n in range(1, 4)])
    index.upsert("dropped", [item(n) for n in range(4, 7)])
    assert sum(path.is_dir() for path in tmp_path.iterdir()) == 2
    index.drop("dropped")
    assert sum(path.is_dir() for path in tmp_path.iterdir()) == 2  # Chroma leaves it

    assert compact(tmp_path).segments_removed == 1

    assert sum(path.is_dir() for path in tmp_path.iterdir()) == 1
    assert index.versions("kept") == {1: 1, 2: 1, 3: 1}


def test_compact_where_chroma_never_wrote_does_nothing(tmp_path: Path) -> None:
    assert compact(tmp_path) == Compacted()


def test_compact_of_a_file_that_is_not_a_database_raises_compaction_failed(
    tmp_path: Path,
) -> None:
    (tmp_path / DB_FILE).write_bytes(b"not a database " * 100)
    with pytest.raises(CompactionFailed, match="not a database"):
        compact(tmp_path)


def write_segment(segment: Path, *, version: int = 1, elements: int = 2) -> None:
    """A segment of 5 slots of 10 bytes, ``elements`` of them used; the rest as if from a heap."""
    segment.mkdir()
    (segment / "header.bin").write_bytes(
        struct.pack("<i4Q", version, 0, 5, elements, 10) + bytes(40)
    )
    (segment / "data_level0.bin").write_bytes(b"E" * 10 * elements + SECRET * 5)
    (segment / "length.bin").write_bytes(b"L" * 4 * elements + SECRET[:4] * 3)


def test_scrub_zeroes_what_follows_the_elements_and_nothing_of_them(tmp_path: Path) -> None:
    segment = tmp_path / str(uuid.uuid4())
    write_segment(segment)

    assert scrub(segment) == 5 * len(SECRET) + 12

    assert (segment / "data_level0.bin").read_bytes() == b"E" * 20 + bytes(5 * len(SECRET))
    assert (segment / "length.bin").read_bytes() == b"L" * 8 + bytes(12)
    assert scrub(segment) == 0  # nothing left to write
    assert segment_dirs(tmp_path) == [segment]


def test_scrub_leaves_a_segment_of_another_version_or_with_no_header(tmp_path: Path) -> None:
    other = tmp_path / str(uuid.uuid4())
    write_segment(other, version=2)
    empty = tmp_path / str(uuid.uuid4())
    empty.mkdir()

    assert (scrub(other), scrub(empty)) == (0, 0)
    assert SECRET in (other / "data_level0.bin").read_bytes()


def test_compact_purges_what_every_segment_applied_when_chroma_does_not(tmp_path: Path) -> None:
    # A store whose log purge is off (as Chroma before 0.5.6 left it), its HNSW index saved
    # every 10 changes: the log keeps what both segments have applied.
    client = chromadb.PersistentClient(path=tmp_path, settings=Settings(anonymized_telemetry=False))
    client.heartbeat()
    client.close()
    with closing(sqlite3.connect(tmp_path / DB_FILE)) as db, db:
        db.execute(
            "UPDATE embeddings_queue_config SET config_json_str = "
            """'{"automatically_purge": false, "_type": "EmbeddingsQueueConfigurationInternal"}'"""
        )
    client = chromadb.PersistentClient(path=tmp_path, settings=Settings(anonymized_telemetry=False))
    saved_often: CreateCollectionConfiguration = {"hnsw": {"space": "cosine", "sync_threshold": 10}}
    collection = client.create_collection("often", configuration=saved_often)
    for start in range(0, 30, 5):
        ids = [str(n) for n in range(start, start + 5)]
        collection.add(ids=ids, embeddings=[[float(n), 1.0, 2.0] for n in range(start, start + 5)])
    client.close()
    assert len(queue_rows(tmp_path)) == 30

    assert compact(tmp_path).consumed == 29  # the newest entry stays: it numbers the next

    assert len(queue_rows(tmp_path)) == 1
    client = chromadb.PersistentClient(path=tmp_path, settings=Settings(anonymized_telemetry=False))
    try:
        assert client.get_collection("often").count() == 30
    finally:
        client.close()
