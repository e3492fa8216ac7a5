"""Forget, checked the hard way: the forgotten sentence's bytes are nowhere on disk afterwards.

On SQLite: no file under the data dir (the database after its checkpoint, its log, the embedded
Chroma directory, the saved lexical index) holds them. On PostgreSQL: a pg_dump of the store does
not. The lexical index holds words lowercased and stemmed, so those are looked for too. Chroma
holds the memory's tags and metadata (not its content): the sentence's words are put there too,
and the forget alone, with no index sync after it, takes them out of Chroma's files.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

from secretary.config import Settings
from store.operations import CreateMemory
from store.requests import search_request
from store.service import Store
from store.settings import DatabaseSettings
from store.write.forget import ForgetSelection
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 5, 1, tzinfo=UTC)
# Unique enough to appear nowhere by chance; the first line is what the test looks for.
SECRET = "Quillon Vantabrisk keeps the spare key under the blue heron statue"
# The words of SECRET no other text has, as the lexical index keeps them.
STEMS = (b"quillon", b"vantabrisk", b"heron")  # not "statu": "status" is in every schema
OTHERS = ["walked the dog by the river", "bought a red bike on sale", "likes jasmine tea"]
# What the memory's tags and metadata say, which Chroma keeps beside its vector.
TAG = "Quillon Vantabrisk"
PLACE = "the blue heron statue of Vantabrisk"


def _fill(store: Store) -> int:
    """Store the sentence as a log line and, as the extractor would, a memory citing it."""
    store.add_memories(
        "ns", [{"content": text, "timestamp": NOW.isoformat()} for text in OTHERS], now=NOW
    )
    (line,) = store.add_logs(
        "ns",
        [{"session_id": "s", "role": "user", "content": SECRET, "timestamp": NOW.isoformat()}],
        now=NOW,
    ).ids
    extract = CreateMemory(
        key="m",
        content=SECRET,
        type="fact",
        event_time=NOW,
        metadata={"source_log_ids": [line], "place": PLACE},
    )
    made = store.db.writer.apply("ns", "extractor", [extract], now=NOW)
    _, operations = store.db.records.get(made.record_id)  # type: ignore[arg-type]
    memory_id = operations[0].target_id
    # An edit leaves images of the text in its record; a search warms the lexical cache.
    store.edit("ns", memory_id, {"tags": ["home", TAG]}, now=NOW)
    store.indexer.sync()
    assert _found(store) == [memory_id]
    assert _files_holding(store.settings.chroma_path, b"Vantabrisk")  # Chroma's metadata
    return memory_id


def _found(store: Store) -> list[int]:
    request = search_request(namespace="ns", query="spare key heron statue", reinforce=False)
    return [hit.memory.id for hit in store.search(request, now=NOW).hits][:1]


def _forget(store: Store, memory_id: int) -> None:
    result = store.forget("ns", ForgetSelection(ids=(memory_id,), logs=True), now=NOW, by="test")
    assert result.plan.logs  # the line it was extracted from goes too
    assert (result.index_pending, result.warning) == (False, None)
    assert store.db.work.outbox_size() == 0  # the vector index took it: no sync needed
    assert memory_id not in _found(store)
    # While the store is still open, Chroma's files hold none of it either.
    assert _files_holding(store.settings.chroma_path, b"Vantabrisk") == []


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(Settings(data_dir=tmp_path), create=True, embedder=FakeEmbedder())
    yield store
    store.close()


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_forget_leaves_no_byte_of_the_sentence_in_the_sqlite_store_or_chroma(
    sqlite_store: Store, tmp_path: Path
) -> None:
    memory_id = _fill(sqlite_store)
    needle = SECRET.encode()
    assert _files_holding(tmp_path, needle)  # it is there before (the database, its log)
    lexical = sqlite_store.settings.lexical_path
    assert lexical is not None
    assert all(_files_holding(lexical, stem) for stem in STEMS)  # the saved lexical index

    _forget(sqlite_store, memory_id)
    sqlite_store.close()

    assert _files_holding(tmp_path, needle) == []
    # Nor any long piece of it (a label cut short, a reason quoting it).
    assert _files_holding(tmp_path, SECRET[:24].encode()) == []
    assert _files_holding(tmp_path, b"Vantabrisk") == []
    assert [_files_holding(tmp_path, stem) for stem in STEMS] == [[]] * len(STEMS)


@pytest.mark.postgres
def test_forget_leaves_no_byte_of_the_sentence_in_a_pg_dump(
    postgres_engine: Engine, tmp_path: Path
) -> None:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        pytest.skip("pg_dump is not installed")
    from tests.conftest import truncate

    truncate(postgres_engine)
    url = postgres_engine.url.render_as_string(hide_password=False)
    settings = Settings(data_dir=tmp_path, database=DatabaseSettings(url=url))
    store = Store.open(settings, embedder=FakeEmbedder())
    try:
        memory_id = _fill(store)
        libpq_url = url.replace("postgresql+psycopg://", "postgresql://")
        before = subprocess.run([pg_dump, libpq_url], capture_output=True, check=True).stdout
        assert SECRET.encode() in before

        _forget(store, memory_id)
    finally:
        store.close()
    dump = subprocess.run([pg_dump, libpq_url], capture_output=True, check=True).stdout
    assert b"Vantabrisk" not in dump
    assert _files_holding(tmp_path, b"Vantabrisk") == []  # the Chroma directory
    assert [_files_holding(tmp_path, stem) for stem in STEMS] == [[]] * len(STEMS)  # lexical
