"""The HTTP API over a real store (SQLite and embedded Chroma in tmp_path), and its workers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from secretary.config import Settings
from store.api.app import create_app, serve
from store.api.deps import api_state
from store.db import session_factory
from store.models import ConversationLog, Memory
from store.service import Store
from store.settings import ApiKey, ApiSettings, DatabaseSettings, IngestSettings
from store.vector.index import VectorIndexError
from store.vector.workers import IndexWorker, backoff_delay

KEY_A = "key-a-0123456789"
KEY_B = "key-b-0123456789"
KEY_AB = "key-ab-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="agent a"),
    ApiKey(key=KEY_B, namespaces=("b",)),
    ApiKey(key=KEY_AB, namespaces=("a", "b")),
)
MAX_K = 20
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


A = auth(KEY_A)
B = auth(KEY_B)
JSON = {"Content-Type": "application/json"}


def open_store(data_dir: Path, keys: tuple[ApiKey, ...] = KEYS) -> Store:
    config = Settings(data_dir=data_dir, api=ApiSettings(keys=keys, max_k=MAX_K))
    return Store.open(config, create=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def app(store: Store) -> FastAPI:
    return create_app(store, start_workers=False)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


def memory_count(store: Store) -> int:
    with session_factory(store.db.engine)() as session:
        return int(session.scalar(select(func.count()).select_from(Memory)) or 0)


def log_count(store: Store) -> int:
    with session_factory(store.db.engine)() as session:
        return int(session.scalar(select(func.count()).select_from(ConversationLog)) or 0)


def problems(response: Any) -> list[str]:
    """Return 'where: what' for each problem of an error response, checking the error shape."""
    error = response.json()["error"]
    assert error["status"] == response.status_code
    assert error["message"]
    return [f"{p['where']}: {p['what']}" for p in error["problems"]]


def ingest(client: TestClient, body: Any, headers: dict[str, str] = A, **params: str) -> Any:
    return client.post("/v1/memories", json=body, headers=headers, params=params)


# -- ingest ------------------------------------------------------------------------------------


def test_post_memories_one_object_returns_201_with_ids(client: TestClient, store: Store) -> None:
    response = ingest(client, {"content": "went hiking", "tags": ["trip"], "importance": 7})
    assert response.status_code == 201
    body = response.json()
    assert body["ids"] == body["created"] == [1]
    assert body["record_id"] is not None
    memory = store.db.memories.get("a", 1)
    assert memory is not None
    assert (memory.tags, memory.importance, memory.source) == (("trip",), 7, "api")


def test_post_memories_batch_returns_ids_in_input_order(client: TestClient) -> None:
    batch = [
        {"content": "likes tea", "type": "preference", "external_id": "x1"},
        {"content": "met Ana", "timestamp": "2026-01-05T10:00:00Z", "session_id": "s1"},
        {"content": "tool X timed out", "type": "tool_experience", "metadata": {"tool": "x"}},
    ]
    response = ingest(client, batch)
    assert response.status_code == 201
    assert response.json()["ids"] == [1, 2, 3]


def test_post_memories_same_batch_twice_returns_200_and_changes_nothing(
    client: TestClient, store: Store
) -> None:
    batch = [{"content": "likes tea"}, {"content": "has a cat", "external_id": "cat"}]
    first = ingest(client, batch).json()
    exported = list(store.db.memories.export("a"))
    again = ingest(client, batch)
    assert again.status_code == 200
    assert again.json() == {"ids": first["ids"], "created": [], "updated": [], "record_id": None}
    assert list(store.db.memories.export("a")) == exported


def test_post_memories_bad_item_rejects_batch_naming_index(
    client: TestClient, store: Store
) -> None:
    batch = [
        {"content": "fine"},
        {"content": "bad importance", "importance": 11},
        {"content": "fine too"},
        {"type": "event"},
    ]
    response = ingest(client, batch)
    assert response.status_code == 422
    named = problems(response)
    assert any(p.startswith("item 1: importance") for p in named)
    assert any(p.startswith("item 3: content") for p in named)
    assert not any(p.startswith(("item 0", "item 2")) for p in named)
    assert memory_count(store) == 0
    assert store.db.records.find() == []


def test_post_memories_over_max_batch_rejected(tmp_path: Path) -> None:
    store = Store.open(Settings(data_dir=tmp_path, ingest=IngestSettings(max_batch=2)), create=True)
    with TestClient(create_app(store, start_workers=False)) as client:
        response = client.post("/v1/memories", json=[{"content": str(i)} for i in range(3)])
    store.close()
    assert response.status_code == 422
    assert any(p.startswith("batch:") for p in problems(response))


def test_post_logs_batch_then_repost_is_idempotent(client: TestClient, store: Store) -> None:
    lines = [
        {"session_id": "s1", "role": "user", "content": "hi", "timestamp": "2026-01-05T10:00:00Z"},
        {
            "session_id": "s1",
            "role": "assistant",
            "content": "hello",
            "timestamp": "2026-01-05T10:00:01Z",
            "idempotency_key": "k2",
        },
    ]
    first = client.post("/v1/logs", json=lines, headers=A)
    assert first.status_code == 201
    assert len(first.json()["created"]) == 2
    again = client.post("/v1/logs", json=lines[1], headers=A)
    assert again.status_code == 200
    assert again.json()["created"] == []
    assert log_count(store) == 2


def test_post_logs_missing_timestamp_rejected(client: TestClient, store: Store) -> None:
    response = client.post(
        "/v1/logs", json={"session_id": "s", "role": "user", "content": "x"}, headers=A
    )
    assert response.status_code == 422
    assert any(p.startswith("body: timestamp") for p in problems(response))
    assert log_count(store) == 0


# -- search and reinforcement ------------------------------------------------------------------


def seed(client: TestClient, store: Store) -> list[int]:
    batch = [
        {"content": "We went hiking in the Alps last summer", "tags": ["trip", "outdoor"]},
        {"content": "Ana prefers green tea over coffee", "type": "preference"},
        {"content": "Hiking boots were bought in Zurich", "metadata": {"shop": "zurich", "n": 2}},
    ]
    ids: list[int] = ingest(client, batch).json()["ids"]
    store.indexer.sync()
    return ids


def search(client: TestClient, headers: dict[str, str] = A, **params: Any) -> Any:
    return client.get("/v1/search", params=params, headers=headers)


def test_search_returns_hits_with_breakdown(client: TestClient, store: Store) -> None:
    ids = seed(client, store)
    response = search(client, q="hiking in the Alps", k=2)
    assert response.status_code == 200
    body = response.json()
    assert body["degraded"] == []
    assert 1 <= len(body["hits"]) <= 2
    top = body["hits"][0]
    assert top["id"] == ids[0]
    assert set(top) == {
        "id", "external_id", "content", "type", "tags", "importance", "event_time",
        "session_id", "metadata", "score", "breakdown", "via",
    }  # fmt: skip
    assert top["breakdown"]["score"] == pytest.approx(top["score"])
    assert top["via"] in {"anchor", "spread"}


def test_search_filters_restrict_hits(client: TestClient, store: Store) -> None:
    ids = seed(client, store)
    by_type = search(client, q="tea hiking", type="preference").json()["hits"]
    assert [hit["id"] for hit in by_type] == [ids[1]]
    by_tags = search(client, q="hiking", tag=["trip", "outdoor"]).json()["hits"]
    assert [hit["id"] for hit in by_tags] == [ids[0]]
    by_meta = search(client, q="hiking", meta=["shop=zurich", "n=2"]).json()["hits"]
    assert [hit["id"] for hit in by_meta] == [ids[2]]
    assert search(client, q="hiking", meta="shop=zur").json()["hits"] == []  # whole value only


def test_search_time_window_excludes_outside_events(client: TestClient, store: Store) -> None:
    ingest(client, [
        {"content": "hiking in March", "timestamp": "2026-03-10T10:00:00Z"},
        {"content": "hiking in May", "timestamp": "2026-05-10T10:00:00Z"},
    ])  # fmt: skip
    store.indexer.sync()
    hits = search(client, q="hiking", since="2026-04-01T00:00:00Z", until="2026-06-01").json()
    assert [hit["content"] for hit in hits["hits"]] == ["hiking in May"]


def test_search_reinforce_true_reinforces_after_flush(
    app: FastAPI, client: TestClient, store: Store
) -> None:
    with freeze_time(T0):
        ids = seed(client, store)
    with freeze_time(T1):
        hits = search(client, q="hiking Alps", k=1).json()["hits"]
    assert [hit["id"] for hit in hits] == [ids[0]]
    before = store.db.memories.get("a", ids[0])
    assert before is not None
    assert before.access_count == 0  # written off the request path
    assert api_state(app).reinforcer.flush() == 1
    after = store.db.memories.get("a", ids[0])
    assert after is not None
    assert after.access_count == 1
    assert after.last_accessed == T1
    assert after.base_importance == pytest.approx(5.1)


def test_search_reinforce_false_changes_nothing(
    app: FastAPI, client: TestClient, store: Store
) -> None:
    ids = seed(client, store)
    exported = list(store.db.memories.export("a"))
    response = search(client, q="hiking", reinforce="false")
    assert response.status_code == 200
    assert response.json()["hits"]
    assert api_state(app).reinforcer.pending == 0
    assert api_state(app).reinforcer.flush() == 0
    assert list(store.db.memories.export("a")) == exported
    assert store.db.memories.get("a", ids[0]).access_count == 0  # type: ignore[union-attr]


def test_lifespan_shutdown_flushes_reinforcement_and_stops_threads(store: Store) -> None:
    with TestClient(create_app(store, start_workers=True)) as client:
        running = {thread.name for thread in threading.enumerate()}
        assert {"reinforcer", "index-worker"} <= running
        ids = seed(client, store)
        assert search(client, q="hiking Alps", k=1).json()["hits"][0]["id"] == ids[0]
    running = {thread.name for thread in threading.enumerate()}
    assert not {"reinforcer", "index-worker"} & running
    memory = store.db.memories.get("a", ids[0])
    assert memory is not None
    assert memory.access_count == 1


# -- keys and namespaces -----------------------------------------------------------------------


def test_get_memory_other_namespace_404_identical_to_missing(client: TestClient) -> None:
    theirs = ingest(client, {"content": "B's secret"}, headers=B).json()["ids"][0]
    forbidden = client.get(f"/v1/memories/{theirs}", params={"namespace": "b"}, headers=A)
    missing = client.get(f"/v1/memories/{theirs}", headers=A)  # not in A's own namespace
    assert forbidden.status_code == missing.status_code == 404
    assert forbidden.content == missing.content
    assert forbidden.json()["error"]["message"] == f"memory {theirs} does not exist"
    history = client.get(f"/v1/memories/{theirs}/history", params={"namespace": "b"}, headers=A)
    assert history.status_code == 404
    assert history.content == missing.content
    assert client.get(f"/v1/memories/{theirs}", headers=B).status_code == 200


def test_search_other_namespace_403(client: TestClient, store: Store) -> None:
    response = search(client, q="secret", namespace="b")
    assert response.status_code == 403
    assert any(p.startswith("query.namespace") for p in problems(response))


def test_post_memories_other_namespace_403_writes_nothing(client: TestClient, store: Store) -> None:
    response = ingest(client, {"content": "x"}, namespace="b")
    assert response.status_code == 403
    assert memory_count(store) == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/search?q=x"), ("POST", "/v1/memories"), ("GET", "/v1/memories/1")],
)
@pytest.mark.parametrize("headers", [{}, auth("not-a-key-at-all"), {"Authorization": "Basic x"}])
def test_request_without_valid_key_401(
    client: TestClient, method: str, path: str, headers: dict[str, str]
) -> None:
    response = client.request(method, path, headers=headers, json={"content": "x"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert problems(response)


def test_x_api_key_header_accepted(client: TestClient) -> None:
    response = ingest(client, {"content": "x"}, headers={"X-API-Key": KEY_B})
    assert response.status_code == 201
    assert client.get("/v1/memories/1", headers=B).json()["namespace"] == "b"


def test_namespace_omitted_multi_namespace_key_422(client: TestClient) -> None:
    response = ingest(client, {"content": "x"}, headers=auth(KEY_AB))
    assert response.status_code == 422
    assert any(p.startswith("query.namespace") for p in problems(response))
    assert ingest(client, {"content": "x"}, headers=auth(KEY_AB), namespace="b").status_code == 201


def test_open_api_without_keys_uses_default_namespace(tmp_path: Path) -> None:
    store = open_store(tmp_path, keys=())
    with TestClient(create_app(store, start_workers=False)) as client:
        assert client.post("/v1/memories", json={"content": "x"}).status_code == 201
        assert client.get("/v1/memories/1").json()["namespace"] == "default"
        assert client.get("/v1/memories/1", params={"namespace": "other"}).status_code == 404
    store.close()


# -- memories by id ----------------------------------------------------------------------------


def test_get_memory_returns_detail(client: TestClient) -> None:
    ingest(client, {"content": "likes tea", "pinned": True, "metadata": {"k": "v"}})
    body = client.get("/v1/memories/1", headers=A).json()
    assert body["content"] == "likes tea"
    assert (body["pinned"], body["status"], body["metadata"]) == (True, "active", {"k": "v"})
    assert body["access_count"] == 0


def test_history_lists_records_touching_memory(client: TestClient) -> None:
    ingest(client, {"content": "first", "timestamp": "2026-01-01T00:00:00Z"})
    # Linking the second memory after the first touches the first one too.
    ingest(client, {"content": "second", "timestamp": "2026-01-02T00:00:00Z"})
    response = client.get("/v1/memories/1/history", headers=A)
    assert response.status_code == 200
    records = response.json()["records"]
    assert [r["job"] for r in records] == ["ingest", "ingest"]
    assert set(records[0]) == {"id", "job", "namespace", "status", "started_at", "finished_at"}
    assert records[0]["namespace"] == "a"


# -- operations --------------------------------------------------------------------------------


def test_healthz_needs_no_key_and_reports_outbox(client: TestClient) -> None:
    ingest(client, [{"content": "a"}, {"content": "b"}])
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("status", "database", "outbox", "warm")} == {
        "status": "ok",
        "database": "ok",
        "outbox": 2,
        "warm": False,
    }
    assert body["lexical_index"] == {"status": "warming", "warm": False}
    assert body["vector_index"]["outbox"] == 2


def test_healthz_warm_after_warm_up(client: TestClient, app: FastAPI, store: Store) -> None:
    ingest(client, [{"content": "Maya ran a half marathon in Lisbon"}])
    api_state(app).warmer.run()
    assert client.get("/healthz").json()["warm"] is True
    assert len(store.lexical) == 1  # the namespace's BM25 index is built


def test_healthz_database_unreachable_503(tmp_path: Path) -> None:
    # Nothing listens on port 1: every connection is refused at once.
    config = Settings(
        data_dir=tmp_path, database=DatabaseSettings(url="postgresql://nobody@127.0.0.1:1/none")
    )
    with TestClient(create_app(Store(config), start_workers=False)) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"] == "unreachable"


def test_metrics_exposes_our_metric_names(client: TestClient, store: Store, app: FastAPI) -> None:
    seed(client, store)
    search(client, q="hiking")
    # A second app in the same process must not collide with the first one's metrics.
    create_app(store, start_workers=False)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name in (
        "secretary_http_requests_total",
        "secretary_http_request_duration_seconds",
        "secretary_searches_total",
        "secretary_memories_ingested_total",
        "secretary_index_outbox_size",
        "secretary_reinforcement_pending",
    ):
        assert name in text
    assert 'route="/v1/search",status="200"' in text
    assert "secretary_memories_ingested_total 3.0" in text
    pending = api_state(app).reinforcer.pending
    assert pending > 0
    assert f"secretary_reinforcement_pending {float(pending)}" in text


def test_openapi_json_served_with_our_paths(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {
        "/v1/memories", "/v1/logs", "/v1/search", "/v1/memories/{memory_id}",
        "/v1/memories/{memory_id}/history", "/healthz", "/metrics",
    } <= set(paths)  # fmt: skip
    params = {p["name"] for p in paths["/v1/search"]["get"]["parameters"]}
    assert {"q", "namespace", "k", "type", "tag", "since", "until", "meta"} <= params


def test_serve_default_binds_localhost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: calls.append(kwargs))
    store = Store.open(Settings(data_dir=tmp_path), create=True)
    serve(store)
    store.close()
    assert ApiSettings().host == "127.0.0.1"
    assert calls[0]["host"] == "127.0.0.1"
    assert calls[0]["port"] == ApiSettings().port


# -- malformed requests --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"q": "x", "k": 0}, "query.k"),
        ({"q": "x", "k": MAX_K + 1}, "query.k"),
        ({"q": "x", "k": "ten"}, "query.k"),
        ({}, "query.q"),
        ({"q": "   "}, "query.q"),
        ({"q": "x", "since": "yesterday"}, "query.since"),
        ({"q": "x", "since": "2026-02-01", "until": "2026-01-01"}, "query.since"),
        ({"q": "x", "until": "9999-12-31T23:00:00-05:00"}, "query.until"),
        ({"q": "x", "type": "Not A Type"}, "query.type"),
        ({"q": "x", "meta": "no-equals-sign"}, "query.meta"),
        ({"q": "x", "min_score": "nan"}, "query.min_score"),
        ({"q": "x", "min_score": 1.5}, "query.min_score"),
        ({"q": "x", "min_score": -0.1}, "query.min_score"),
        ({"q": "x", "reinforce": "perhaps"}, "query.reinforce"),
        ({"q": "x", "namespace": ""}, "query.namespace"),
    ],
)
def test_search_malformed_query_422_names_parameter(
    client: TestClient, params: dict[str, Any], where: str
) -> None:
    response = search(client, **params)
    assert response.status_code == 422
    assert any(p.startswith(where) for p in problems(response)), problems(response)


@pytest.mark.parametrize(
    ("body", "status", "where"),
    [
        (b"{not json", 400, "body"),
        (b'{"content": NaN}', 400, "body"),
        (b'{"content": "x", "metadata": {"n": 1e400}}', 400, "body"),
        (b"[" * 100_000, 400, "body"),
        (b"42", 422, "body"),
        (b"[]", 422, "body"),
        (b'["just a string"]', 422, "item 0"),
        (b'{"content": "x", "colour": "red"}', 422, "body: colour"),
        (b'{"content": "x", "timestamp": "soon"}', 422, "body: timestamp"),
        (b'{"content": "x", "timestamp": "9999-12-31T23:00:00-05:00"}', 422, "body"),
        (b'{"content": "x", "type": "Bad-Type"}', 422, "body: type"),
        (b'{"content": "x", "tags": "notalist"}', 422, "body: tags"),
    ],
)
def test_post_memories_malformed_body_4xx_names_problem(
    client: TestClient, store: Store, body: bytes, status: int, where: str
) -> None:
    response = client.post("/v1/memories", content=body, headers={**A, **JSON})
    assert response.status_code == status
    assert any(p.startswith(where) for p in problems(response)), problems(response)
    assert memory_count(store) == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "where", "what"),
    [
        (
            "POST",
            "/v1/memories",
            rb'{"content": "x", "metadata": {"k": "\ud800"}}',
            "body",
            "metadata: value at k holds a lone surrogate (\\ud800) at character 1",
        ),
        (
            "POST",
            "/v1/memories",
            rb'[{"content": "x"}, {"content": "y", "tags": ["\udcff"]}]',
            "item 1",
            "tags: value at 0 holds a lone surrogate (\\udcff",
        ),
        (
            "POST",
            "/v1/logs",
            rb'{"session_id": "s", "role": "user", "content": "hi\ud800",'
            rb' "timestamp": "2026-03-01T12:00:00Z"}',
            "body",
            "content: holds a lone surrogate (\\ud800) at character 3",
        ),
        (
            "PATCH",
            "/v1/memories/1",
            rb'{"metadata": {"k\ud800": 1}}',
            "body.metadata",
            "key 'k\\ud800' holds a lone surrogate",
        ),
        (
            "PATCH",
            "/v1/memories/1",
            rb'{"content": "\ud800"}',
            "body.content",
            "holds a lone surrogate",
        ),
    ],
)
def test_lone_surrogate_in_a_body_is_422_naming_the_field_writing_nothing(
    client: TestClient, store: Store, method: str, path: str, body: bytes, where: str, what: str
) -> None:
    client.post("/v1/memories", json={"content": "kept"}, headers=A)
    before = client.get("/v1/memories/1", headers=A).json()

    response = client.request(method, path, content=body, headers={**A, **JSON})

    assert response.status_code == 422, response.text
    [problem] = response.json()["error"]["problems"]
    assert problem["where"] == where
    assert problem["what"].startswith(what), problem
    assert (memory_count(store), log_count(store)) == (1, 0)
    assert client.get("/v1/memories/1", headers=A).json() == before


def test_search_query_not_utf8_is_never_a_5xx(client: TestClient) -> None:
    # Percent-decoding reads bytes that are not UTF-8 as U+FFFD: no lone surrogate gets in.
    response = client.get("/v1/search?q=%ED%A0%80&meta=k%3D%FF", headers=A)

    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/memories/abc", 422),
        ("GET", "/v1/memories/0", 422),
        ("GET", f"/v1/memories/{2**70}", 422),
        ("GET", "/v1/nothing-here", 404),
        ("DELETE", "/v1/memories/1", 404),
        ("PUT", "/v1/memories/1", 405),
    ],
)
def test_malformed_path_or_method_json_error(
    client: TestClient, method: str, path: str, status: int
) -> None:
    response = client.request(method, path, headers=A)
    assert response.status_code == status
    assert problems(response)


# -- fuzzing: no input may cause a 5xx or a write when rejected -----------------------------------

_text = st.text(max_size=40)
# Bodies are JSON: a lone surrogate ("\ud800") is text they can carry, the query string is not.
_body_text = st.text(st.characters(exclude_categories=()), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _body_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_body_text, inner, max_size=4),
    max_leaves=12,
)
_field = st.sampled_from(
    ["content", "type", "timestamp", "tags", "importance", "metadata", "external_id",
     "session_id", "pinned", "role", "idempotency_key"]
)  # fmt: skip
_memory_like = st.dictionaries(_field, _json | _body_text, max_size=6)
_bodies = st.one_of(
    st.binary(max_size=64).map(lambda b: ("raw", b)),
    _json.map(lambda v: ("json", v)),
    _memory_like.map(lambda v: ("json", v)),
    st.lists(_memory_like, max_size=3).map(lambda v: ("json", v)),
)
_param_names = st.sampled_from(
    ["q", "k", "namespace", "type", "tag", "since", "until", "meta", "min_score", "reinforce"]
)
_queries = st.lists(st.tuples(_param_names, _text), max_size=8)
FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,  # nothing written under the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(kind_body=_bodies, path=st.sampled_from(["/v1/memories", "/v1/logs"]))
def test_fuzz_ingest_bodies_never_5xx(
    client: TestClient, store: Store, kind_body: tuple[str, Any], path: str
) -> None:
    kind, body = kind_body
    content = body if kind == "raw" else json.dumps(body).encode()
    before = (memory_count(store), log_count(store))
    response = client.post(path, content=content, headers={**A, **JSON})
    assert response.status_code < 500
    if response.status_code >= 400:
        assert problems(response)
        assert (memory_count(store), log_count(store)) == before


@FUZZ
@given(query=_queries)
def test_fuzz_search_query_never_5xx(client: TestClient, query: list[tuple[str, str]]) -> None:
    params: list[tuple[str, str | int | float | bool | None]] = list(query)
    response = client.get("/v1/search", params=params, headers=A)
    assert response.status_code < 500
    if response.status_code >= 400:
        assert problems(response)


# -- the index worker ----------------------------------------------------------------------------


def test_backoff_delay_doubles_up_to_cap() -> None:
    delays = [backoff_delay(n, interval=1.0, cap=5.0) for n in (1, 2, 3, 4, 100)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_index_worker_index_down_survives_and_recovers() -> None:
    outcomes: list[int | Exception] = [VectorIndexError("chroma is down"), 3]

    def sync() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    worker = IndexWorker(sync)
    assert worker.run_once() is False
    assert worker.failures == 1
    assert worker.run_once() is True
    assert worker.failures == 0


def test_index_worker_unexpected_error_counted_not_raised() -> None:
    def sync() -> int:
        raise RuntimeError("a bug")

    worker = IndexWorker(sync)
    worker._attempt()  # what the thread runs each round
    assert worker.failures == 1


def test_index_worker_kick_syncs_and_close_stops_thread() -> None:
    synced = threading.Event()

    def sync() -> int:
        synced.set()
        return 1

    worker = IndexWorker(sync, interval=3600.0)  # only the kick can trigger a sync
    worker.start()
    try:
        worker.kick()
        assert synced.wait(10)  # a signal from the thread, not a timed sleep
    finally:
        worker.close()
    assert "index-worker" not in {thread.name for thread in threading.enumerate()}


def test_index_worker_applies_outbox_of_real_store(client: TestClient, store: Store) -> None:
    ingest(client, [{"content": "a"}, {"content": "b"}])
    worker = IndexWorker(lambda: store.indexer.sync())
    assert worker.run_once() is True
    assert store.db.work.outbox_size() == 0
    assert store.indexer.verify("a").clean


# -- admin keys --------------------------------------------------------------------------------

ADMIN = "key-admin-0123456789"


def test_admin_key_reads_and_writes_every_namespace(tmp_path: Path) -> None:
    store = open_store(tmp_path, (*KEYS, ApiKey(key=ADMIN, namespaces=("*",))))
    admin = auth(ADMIN)
    with TestClient(create_app(store, start_workers=False)) as test_client:
        assert ingest(test_client, {"content": "apples in a"}, A).status_code == 201
        written = ingest(test_client, {"content": "apples in c"}, admin, namespace="c")
        assert written.status_code == 201
        memory_c = written.json()["ids"][0]
        listed = test_client.get("/v1/namespaces", headers=admin).json()
        assert {n["namespace"] for n in listed["namespaces"]} >= {"a", "c"}
        path = f"/v1/memories/{memory_c}"
        assert test_client.get(path, params={"namespace": "c"}, headers=admin).status_code == 200
        assert test_client.get(path, params={"namespace": "c"}, headers=A).status_code == 404
        assert test_client.get(path, headers=A).status_code == 404
        query = {"q": "apples", "namespace": "a"}
        found = test_client.get("/v1/search", params=query, headers=admin)
        assert [hit["content"] for hit in found.json()["hits"]] == ["apples in a"]
    store.close()


def test_admin_star_listed_with_other_namespaces_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be listed with other namespaces"):
        ApiKey(key=ADMIN, namespaces=("*", "a"))
