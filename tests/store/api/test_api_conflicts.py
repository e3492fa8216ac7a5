"""POST /v1/memories and /v1/logs: the same id with other content is a 409 naming each item,
with nothing written, unless the caller asks for an update (query or body)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from store.service import Store
from tests.store.api.test_api import A, ingest, log_count, memory_count, problems
from tests.store.api.test_api import app as app  # the fixtures: store, app, client
from tests.store.api.test_api import client as client
from tests.store.api.test_api import store as store

LOG = {"session_id": "s1", "role": "user", "timestamp": "2026-03-01T12:00:00Z"}


def post_logs(client: TestClient, body: Any, **params: str) -> Any:
    return client.post("/v1/logs", json=body, headers=A, params=params)


def test_post_memories_same_external_id_other_content_409_nothing_written(
    client: TestClient, store: Store
) -> None:
    ingest(client, {"content": "likes tea", "external_id": "x1"})
    before = memory_count(store)
    response = ingest(
        client, [{"content": "new"}, {"content": "likes coffee", "external_id": "x1"}]
    )
    assert response.status_code == 409
    assert problems(response) == [
        "item 1: names memory 1 with different content: to change it, ask for an update "
        "(API: on_conflict=update; CLI: --update)"
    ]
    assert response.json()["error"]["message"] == "conflict, nothing written"
    assert memory_count(store) == before


def test_post_memories_two_items_same_external_id_other_content_409(
    client: TestClient, store: Store
) -> None:
    batch = [{"content": "a", "external_id": "x"}, {"content": "b", "external_id": "x"}]
    response = ingest(client, batch, on_conflict="update")
    assert response.status_code == 409
    assert problems(response) == [
        "item 1: external_id 'x' is also on item 0, with different content"
    ]
    assert memory_count(store) == 0


def test_post_memories_on_conflict_update_query_edits_and_records(
    client: TestClient, store: Store
) -> None:
    ingest(client, {"content": "likes tea", "external_id": "x1"})
    response = ingest(
        client, {"content": "likes coffee", "external_id": "x1"}, on_conflict="update"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["ids"], body["created"], body["updated"]) == ([1], [], [1])
    history = client.get("/v1/memories/1/history", headers=A).json()["records"]
    assert [r["id"] for r in history][-1] == body["record_id"]
    assert client.get("/v1/memories/1", headers=A).json()["content"] == "likes coffee"


def test_post_memories_on_conflict_update_in_body(client: TestClient) -> None:
    ingest(client, {"content": "likes tea", "external_id": "x1"})
    body = {"items": [{"content": "likes mate", "external_id": "x1"}], "on_conflict": "update"}
    response = ingest(client, body)
    assert response.status_code == 200
    assert response.json()["updated"] == [1]


def test_post_memories_wrapped_body_problems_are_named(client: TestClient, store: Store) -> None:
    bad = ingest(client, {"items": [], "on_conflict": "merge", "extra": 1})
    assert bad.status_code == 422
    assert problems(bad) == [
        "body.extra: is not a known field",
        "body.items: expected a non-empty array of objects",
        "body.on_conflict: expected one of error, update",
    ]
    clash = ingest(
        client, {"items": [{"content": "x"}], "on_conflict": "error"}, on_conflict="update"
    )
    assert problems(clash) == ["body.on_conflict: disagrees with the on_conflict query parameter"]
    labelled = ingest(client, {"items": [{"content": ""}]})
    assert problems(labelled)[0].startswith("items.0: content")
    assert memory_count(store) == 0


def test_post_memories_bad_on_conflict_query_422(client: TestClient) -> None:
    response = ingest(client, {"content": "x"}, on_conflict="merge")
    assert response.status_code == 422
    assert problems(response)[0].startswith("query.on_conflict")


def test_post_logs_same_key_other_content_409_then_update(client: TestClient, store: Store) -> None:
    post_logs(client, {**LOG, "content": "hello", "idempotency_key": "k1"})
    conflict = post_logs(client, [{**LOG, "content": "bye", "idempotency_key": "k1"}])
    assert conflict.status_code == 409
    assert problems(conflict)[0].startswith("item 0: names log line 1 with different content")
    assert log_count(store) == 1
    updated = post_logs(
        client, {**LOG, "content": "bye", "idempotency_key": "k1"}, on_conflict="update"
    )
    assert updated.status_code == 200
    assert updated.json()["updated"] == [1]
    assert [line.content for line in store.db.work.logs("a", [1])] == ["bye"]
    # Recorded like a memory update: the record's diff tells it, and undo takes it back.
    record_id = updated.json()["record_id"]
    diff = client.get(f"/v1/records/{record_id}/diff", headers=A).json()
    assert diff["lines"][1] == '  log line #1 updated: "hello" -> "bye"'
    assert diff["changes_by_kind"] == {"logs_updated": 1}
    undone = client.post(f"/v1/records/{record_id}/undo", headers=A)
    assert undone.status_code == 200, undone.text
    assert [line.content for line in store.db.work.logs("a", [1])] == ["hello"]
    redone = client.post(f"/v1/records/{undone.json()['record_id']}/undo", headers=A)
    assert redone.status_code == 200, redone.text
    assert [line.content for line in store.db.work.logs("a", [1])] == ["bye"]
