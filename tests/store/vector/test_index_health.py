"""The indexes tell the truth about themselves: a search says in ``degraded``, and /healthz in
its report, when the vector index is unreachable, being rebuilt, behind the outbox or missing
vectors; /readyz waits for the warm-up. None of it costs a search a read of SQL."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from secretary.config import Settings
from store.api.app import create_app
from store.api.deps import api_state
from store.service import Store
from store.vector import health as index_status
from store.vector.health import next_batch
from store.vector.index import VectorIndex, VectorIndexError
from tests.conftest_chroma import ChromaServer
from tests.helpers.fake_embedder import FakeEmbedder

NS = "maya"
NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def eager_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check of the index worker probes and counts (the service waits 10 s and 5 min)."""
    monkeypatch.setattr(index_status, "PROBE_SECONDS", 0.0)
    monkeypatch.setattr(index_status, "COUNT_SECONDS", 0.0)


def open_store(tmp_path: Path, **index: Any) -> Store:
    settings = Settings(data_dir=tmp_path, index=Settings().index.model_copy(update=index))
    return Store.open(settings, create=True, embedder=FakeEmbedder())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store, start_workers=False)) as opened:
        yield opened


def seed(store: Store, namespace: str = NS, count: int = 3) -> None:
    items = [{"content": f"Maya went hiking, trip number {n}"} for n in range(count)]
    store.add_memories(namespace, items, now=NOW)


def search(client: TestClient, namespace: str = NS) -> dict[str, Any]:
    params = {"q": "hiking trip", "namespace": namespace, "reinforce": "false"}
    response = client.get("/v1/search", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def health(client: TestClient, path: str = "/healthz", code: int = 200) -> dict[str, Any]:
    response = client.get(path)
    assert response.status_code == code, response.text
    body: dict[str, Any] = response.json()
    return body


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def until(condition: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.05)  # a background thread's work: real time has to pass


# -- a rebuild ---------------------------------------------------------------------------------


def test_healthz_and_search_report_a_rebuild_until_it_is_done(
    store: Store, client: TestClient
) -> None:
    seed(store)
    store.sync_index()
    assert health(client)["status"] == "ok"
    assert search(client)["degraded"] == []

    store.indexer.request_rebuild([NS])

    report = health(client)
    assert report["status"] == "degraded"
    assert report["vector_index"]["status"] == "rebuilding"
    assert report["vector_index"]["rebuilding"] == [
        {"namespace": NS, "phase": "copying", "copied": 0, "total": 3}
    ]
    found = search(client)
    assert len(found["hits"]) == 3  # the old index still answers
    assert found["degraded"] == [
        "vector index rebuild pending (0 of 3 memories copied): vector results come from the "
        "index being replaced and may be incomplete"
    ]

    store.sync_index()

    assert health(client)["vector_index"]["status"] == "ok"
    assert health(client)["status"] == "ok"
    assert search(client)["degraded"] == []


def test_a_rebuild_cut_short_is_completed_when_the_api_starts(tmp_path: Path) -> None:
    store = open_store(tmp_path, batch_size=2)
    try:
        seed(store, count=7)
        store.indexer.sync()
        store.indexer.request_rebuild([NS])
        store.indexer.sync(limit=4)  # then the process died
        assert store.indexer.pending_rebuilds()[NS].copied == 4
    finally:
        store.close()

    restarted = open_store(tmp_path, batch_size=2)
    try:
        with TestClient(create_app(restarted, start_workers=True)) as client:
            until(lambda: not restarted.indexer.pending_rebuilds(), "finished rebuild")
            until(lambda: health(client)["status"] == "ok", "healthy report")
        assert restarted.indexer.verify(NS).clean
    finally:
        restarted.close()


# -- an index that cannot be reached -----------------------------------------------------------


@pytest.mark.chroma_server
def test_healthz_and_search_report_a_chroma_server_that_stopped(
    dedicated_chroma_server: ChromaServer, tmp_path: Path
) -> None:
    url = dedicated_chroma_server.url
    store = open_store(tmp_path, chroma_url=url)
    try:
        with TestClient(create_app(store, start_workers=False)) as client:
            seed(store)
            store.sync_index()
            assert health(client)["vector_index"]["reachable"] is True

            dedicated_chroma_server.stop()
            store.sync_index()  # nothing to apply: the worker's heartbeat finds it down

            report = health(client)  # still 200: the store answers, lexically
            assert report["status"] == "degraded"
            assert report["vector_index"]["status"] == "unreachable"
            assert report["vector_index"]["reachable"] is False
            assert f"cannot reach the Chroma server at {url}" in report["vector_index"]["error"]
            found = search(client)
            assert len(found["hits"]) == 3
            assert found["degraded"][0].startswith(
                f"vector index unavailable: cannot reach the Chroma server at {url}"
            )
            api_state(client.app).warmer.run()  # type: ignore[arg-type]
            assert health(client, "/readyz")["status"] == "degraded"  # ready all the same
    finally:
        store.close()


def test_healthz_and_search_report_an_unreachable_chroma_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    store = open_store(tmp_path, chroma_url=url)
    try:
        with TestClient(create_app(store, start_workers=False)) as client:
            seed(store)
            with pytest.raises(VectorIndexError):
                store.sync_index()  # what the index worker does, and backs off from

            report = health(client)
            assert (report["status"], report["vector_index"]["status"]) == (
                "degraded",
                "unreachable",
            )
            assert report["vector_index"]["outbox"] == 3
            found = search(client)
            assert len(found["hits"]) == 3  # found lexically
            assert found["degraded"][0].startswith(
                f"vector index unavailable: cannot reach the Chroma server at {url}"
            )
    finally:
        store.close()


# -- a backlog, and vectors gone missing -------------------------------------------------------


def test_search_reports_a_backlog_beyond_the_threshold_in_namespaces_behind(
    store: Store, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_status, "BACKLOG_NOTED", 2)
    seed(store, "other", count=1)
    store.sync_index()
    seed(store)  # three entries wait, all of them maya's
    store.index_status.refresh()

    assert search(client)["degraded"] == [
        "vector index 3 changes behind: the newest memories may be missing from vector results"
    ]
    assert search(client, "other")["degraded"] == []
    assert health(client)["vector_index"]["status"] == "behind"

    store.sync_index()
    assert search(client)["degraded"] == []
    assert health(client)["status"] == "ok"


def test_vectors_lost_with_nothing_pending_are_reported_until_rebuilt(
    store: Store, client: TestClient
) -> None:
    seed(store)
    store.sync_index()
    VectorIndex(store.index._client, FakeEmbedder()).delete(NS, [1])  # lost behind our back

    store.sync_index()

    report = health(client)
    assert report["vector_index"]["status"] == "miscounted"
    assert report["vector_index"]["miscounted"] == [{"namespace": NS, "memories": 3, "vectors": 2}]
    assert search(client)["degraded"] == [
        "vector index holds 2 vectors for 3 memories: run `secretary index verify`"
    ]

    store.indexer.rebuild(NS)

    assert search(client)["degraded"] == []
    store.sync_index()
    assert health(client)["status"] == "ok"


def test_counts_taken_while_the_namespace_changes_decide_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(store)
    store.sync_index()
    count = VectorIndex.count

    def count_while_a_memory_arrives(index: VectorIndex, namespace: str) -> int:
        counted = count(index, namespace)
        seed(store, count=1)  # written (and not yet indexed) between the two counts
        return counted

    monkeypatch.setattr(VectorIndex, "count", count_while_a_memory_arrives)
    store.index_status.check()

    assert store.index_status.current().miscounted == {}


# -- cheap to ask ------------------------------------------------------------------------------


def test_search_reads_nothing_of_the_index_s_health_while_the_snapshot_is_fresh(
    store: Store, client: TestClient
) -> None:
    seed(store)
    store.sync_index()
    search(client)  # the snapshot is taken
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        search(client)
        search(client)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert statements  # the search itself reads memories
    # Which memories of its namespace wait for their vectors is the search's own read
    # (store.search.pending), one indexed lookup; no count of the outbox, no rebuild state.
    pending = (
        "SELECT DISTINCT index_outbox.memory_id \nFROM index_outbox \nWHERE index_outbox.namespace"
    )
    health_reads = [
        s
        for s in statements
        if ("index_outbox" in s and not s.startswith(pending)) or "index_rebuilds" in s
    ]
    assert not health_reads


def test_readyz_waits_for_the_warm_up(store: Store, client: TestClient) -> None:
    seed(store)
    assert health(client, "/readyz", 503)["lexical_index"] == {"status": "warming", "warm": False}
    assert health(client)["status"] == "ok"  # alive and well meanwhile

    api_state(client.app).warmer.run()  # type: ignore[arg-type]

    assert health(client, "/readyz")["lexical_index"] == {"status": "warm", "warm": True}


def test_counts_take_turns_over_the_namespaces() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert next_batch(names, after=None, size=2) == ["a", "b"]
    assert next_batch(names, after="b", size=2) == ["c", "d"]
    assert next_batch(names, after="d", size=2) == ["e", "a"]  # round to the start
    assert next_batch(names, after="zz", size=9) == names  # one gone: from the start, each once
    assert next_batch([], after="a", size=2) == []
