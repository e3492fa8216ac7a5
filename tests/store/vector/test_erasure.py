"""A forget reaches the vector index for good: the vectors go at once (read back to confirm),
and an embedded Chroma is compacted so that a marker put in the memories' content, tags and
metadata is found nowhere under the data directory, idle or with the API's index worker running;
a forget Chroma cannot take commits in SQL, says so, and the next sync finishes it."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import tests.conftest_chroma as chroma_servers
from secretary.config import Settings
from store.api.app import create_app
from store.service import Store
from store.settings import ApiKey, ApiSettings
from store.vector import indexer as indexer_module
from store.vector.compaction import CompactionFailed, compact
from store.vector.index import NEXT
from store.write.forget import ForgetSelection
from tests.helpers.fake_embedder import FakeEmbedder

NS = "ns"
NOW = datetime(2026, 5, 1, tzinfo=UTC)
MARKER = "Quorvixtlan"  # appears nowhere by chance
WIDE = "Ħalvørsgård"  # and its UTF-8 (and JSON-escaped) bytes
KEY = "key-erasure-0123456789"
PORTS = range(18100, 18200)  # the ports this test file may use


def needles() -> list[bytes]:
    """Every form the markers may take in a file: as written, lowercased (the lexical index),
    UTF-8 and JSON-escaped."""
    forms = {MARKER, MARKER.lower(), WIDE, WIDE.lower()}
    escaped = {json.dumps(form)[1:-1] for form in forms}
    return sorted({form.encode("utf-8") for form in forms | escaped})


def occurrences(root: Path) -> dict[str, int]:
    """File (relative to root) -> how many times any form of the markers is in it."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            count = sum(data.count(needle) for needle in needles())
            if count:
                found[str(path.relative_to(root))] = count
    return found


def marked(count: int) -> list[dict[str, object]]:
    return [
        {
            "content": f"{MARKER} keeps letter {n} from {WIDE} in the attic",
            "tags": ["private", MARKER, WIDE],
            "metadata": {"place": f"{WIDE} {MARKER}", "n": n},
        }
        for n in range(count)
    ]


def others(start: int, stop: int) -> list[dict[str, object]]:
    return [
        {"content": f"walked the dog by the river, day {n}", "tags": ["walk"], "metadata": {"n": n}}
        for n in range(start, stop)
    ]


def fill(store: Store) -> list[int]:
    """Store marked memories among others, index them; return the marked ones' ids."""
    store.add_memories(NS, others(0, 30), now=NOW)
    ids = list(store.add_memories(NS, marked(4), now=NOW).ids)
    store.add_memories(NS, others(30, 40), now=NOW)
    store.indexer.sync()
    return ids


def open_store(data_dir: Path, *, chroma_url: str = "", create: bool = True) -> Store:
    settings = Settings(
        data_dir=data_dir,
        index=Settings().index.model_copy(update={"chroma_url": chroma_url}),
        api=ApiSettings(keys=(ApiKey(key=KEY, namespaces=(NS,)),)),
    )
    return Store.open(settings, create=create, embedder=FakeEmbedder())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path)
    yield opened
    opened.close()


def test_forget_leaves_no_byte_of_the_marker_in_any_file_of_an_idle_store(
    store: Store, tmp_path: Path
) -> None:
    ids = fill(store)
    before = occurrences(tmp_path)
    assert before.get("chroma/chroma.sqlite3", 0) > 0  # tags and metadata are Chroma metadata

    result = store.forget(NS, ForgetSelection(ids=tuple(ids)), now=NOW, by="test")

    assert (result.index_pending, result.warning) == (False, None)
    assert store.index.held(NS, ids) == []  # gone from Chroma before forget returned
    assert store.db.work.outbox_size() == 0  # nothing left for a sync
    assert store.index.count(NS) == 40
    assert occurrences(tmp_path) == {}  # the store still open
    store.close()
    assert occurrences(tmp_path) == {}


def test_forget_through_the_api_with_its_index_worker_running_leaves_no_byte(
    store: Store, tmp_path: Path
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(store, start_workers=True)) as client:
        assert client.post("/v1/memories", json=others(0, 30), headers=headers).status_code == 201
        response = client.post("/v1/memories", json=marked(4), headers=headers)
        ids = response.json()["ids"]
        client.post("/v1/memories", json=others(30, 32), headers=headers)
        wait_for(lambda: store.db.work.outbox_size() == 0 and store.index.count(NS) == 36)
        assert occurrences(tmp_path).get("chroma/chroma.sqlite3", 0) > 0

        forgot = client.post("/v1/forget", json={"ids": ids}, headers=headers)
        assert forgot.status_code == 200
        # More writes while the worker runs: none of them brings the marker back.
        client.post("/v1/memories", json=others(32, 40), headers=headers)
        wait_for(lambda: store.db.work.outbox_size() == 0 and store.index.count(NS) == 40)

        assert store.index.held(NS, ids) == []
        assert occurrences(tmp_path) == {}
    assert occurrences(tmp_path) == {}


def test_forget_while_chroma_is_unreachable_commits_says_pending_and_the_next_sync_finishes(
    tmp_path: Path,
) -> None:
    first = open_store(tmp_path)
    ids = fill(first)
    first.close()
    # The same store, its vector index configured as a server that does not answer.
    cut_off = open_store(tmp_path, chroma_url=f"http://127.0.0.1:{closed_port()}", create=False)
    try:
        result = cut_off.forget(NS, ForgetSelection(ids=tuple(ids)), now=NOW, by="test")
        assert result.record_id is not None
        assert result.index_pending is True
        assert result.warning is not None
        assert "not yet from the vector index" in result.warning
        assert all(cut_off.db.memories.get(NS, i) is None for i in ids)  # SQL erased them
        assert cut_off.db.work.outbox_size() >= len(ids)  # kept for the next sync
    finally:
        cut_off.close()
    assert "chroma/chroma.sqlite3" in occurrences(tmp_path)

    reached = open_store(tmp_path, create=False)
    try:
        assert reached.indexer.sync() >= len(ids)
        assert reached.index.held(NS, ids) == []
        assert reached.indexer.verify(NS).clean
        assert occurrences(tmp_path) == {}  # the sync compacted Chroma too
    finally:
        reached.close()


def test_forget_whose_compaction_fails_has_the_vectors_gone_and_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = fill(store)

    def failing(path: Path) -> None:
        raise CompactionFailed(path, "disk full")

    monkeypatch.setattr(indexer_module, "compact", failing)
    result = store.forget(NS, ForgetSelection(ids=tuple(ids)), now=NOW, by="test")

    assert result.index_pending is False
    assert result.warning is not None
    assert "disk full" in result.warning
    assert store.index.held(NS, ids) == []


def test_forget_during_a_rebuild_drops_the_vectors_from_both_collections(
    store: Store, tmp_path: Path
) -> None:
    ids = fill(store)
    store.indexer.request_rebuild([NS])
    store.indexer.sync(limit=40)  # the new collection has the marked memories; then a stop

    result = store.forget(NS, ForgetSelection(ids=tuple(ids)), now=NOW, by="test")

    assert result.index_pending is False
    assert store.index.held(NS, ids, slot=NEXT) == []
    assert store.index.held(NS, ids) == []
    assert occurrences(tmp_path) == {}
    store.indexer.sync()  # the rebuild completes
    assert store.indexer.pending_rebuilds() == {}
    assert store.indexer.verify(NS).clean
    assert segment_dirs(store.settings.chroma_path) == 1
    assert occurrences(tmp_path) == {}


def test_rebuilds_leave_one_segment_directory_per_live_collection(store: Store) -> None:
    fill(store)
    for _ in range(3):
        store.indexer.rebuild(NS)

    collections = store.index._client.list_collections()
    assert len(collections) == 1
    assert segment_dirs(store.settings.chroma_path) == 1
    assert store.indexer.verify(NS).clean


@pytest.mark.chroma_server
def test_forget_on_a_chroma_server_confirms_the_delete_and_its_operator_compacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chroma_servers, "_free_port", closed_port)
    (tmp_path / "server").mkdir()
    try:
        server = chroma_servers.start_chroma_server(tmp_path / "server")
    except chroma_servers.ChromaServerError as exc:
        chroma_servers._unavailable(str(exc))
    server_data = tmp_path / "server" / "data"
    store = open_store(tmp_path / "store", chroma_url=server.url)
    try:
        ids = fill(store)
        assert store.index.path is None  # a server: nothing of it is compacted from here

        result = store.forget(NS, ForgetSelection(ids=tuple(ids)), now=NOW, by="test")

        assert (result.index_pending, result.warning) == (False, None)
        assert store.index.held(NS, ids) == []
        assert store.index.count(NS) == 40
    finally:
        store.close()
        server.stop()
    assert occurrences(tmp_path / "store") == {}
    # The server keeps the bytes until its operator compacts its directory, stopped.
    assert "chroma.sqlite3" in occurrences(server_data)
    compact(server_data)
    assert occurrences(server_data) == {}


def segment_dirs(chroma_path: Path) -> int:
    return sum(1 for found in chroma_path.iterdir() if found.is_dir())


def closed_port() -> int:
    """A port of PORTS nothing listens on (this file's range)."""
    for port in PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise AssertionError("every port of the range is taken")


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll a background thread's progress (the index worker), up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the index worker did not catch up"
        time.sleep(0.05)
