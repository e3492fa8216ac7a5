"""PATCH and DELETE /v1/memories/{id}, POST /v1/forget over a real store, with keys."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from store.api.app import create_app
from store.kinds import Outcome
from store.service import Store
from store.write.record_info import RecordInfo
from tests.store.api.test_api import KEY_AB, A, B, auth, open_store
from tests.store.api.test_api import app as app  # the fixtures: store, app, client
from tests.store.api.test_api import client as client
from tests.store.api.test_api import store as store

AB = auth(KEY_AB)


def add(client: TestClient, content: str, headers: dict[str, str] = A, **fields: Any) -> int:
    response = client.post("/v1/memories", json={"content": content, **fields}, headers=headers)
    assert response.status_code == 201, response.text
    return int(response.json()["ids"][0])


def get(client: TestClient, memory_id: int, headers: dict[str, str] = A) -> dict[str, Any]:
    response = client.get(f"/v1/memories/{memory_id}", headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def problems(response: Any) -> list[str]:
    return [p["where"] for p in response.json()["error"]["problems"]]


def test_patch_edits_in_a_record_that_undo_reverses(client: TestClient) -> None:
    memory_id = add(client, "likes green tea", tags=["drinks"])
    assert client.get(f"/v1/memories/{memory_id}", headers=A).headers["ETag"] == '"1"'
    response = client.patch(
        f"/v1/memories/{memory_id}",
        json={"content": "likes black tea", "importance": 9, "pinned": True},
        headers={**A, "If-Match": '"1"'},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["ETag"] == '"2"'
    assert body["memory"]["content"] == "likes black tea"
    assert (body["memory"]["version"], body["memory"]["pinned"]) == (2, True)
    assert body["memory"]["tags"] == ["drinks"]  # what the edit did not name stays
    history = client.get(f"/v1/memories/{memory_id}/history", headers=A).json()["records"]
    assert [r["job"] for r in history] == ["ingest", "edit"]

    undone = client.post(f"/v1/records/{body['record_id']}/undo", headers=A)
    assert undone.status_code == 200, undone.text
    memory = get(client, memory_id)
    assert (memory["content"], memory["importance"], memory["pinned"]) == (
        "likes green tea",
        5,
        False,
    )


def test_patch_with_a_stale_version_is_409_and_changes_nothing(client: TestClient) -> None:
    memory_id = add(client, "likes green tea")
    first = client.patch(
        f"/v1/memories/{memory_id}", json={"content": "likes tea"}, headers={**A, "If-Match": "1"}
    )
    assert first.status_code == 200
    stale = client.patch(
        f"/v1/memories/{memory_id}",
        json={"content": "likes coffee"},
        headers={**A, "If-Match": '"1"'},
    )
    assert stale.status_code == 409
    assert problems(stale) == ["header.if-match"]
    assert get(client, memory_id)["content"] == "likes tea"
    deleted = client.delete(f"/v1/memories/{memory_id}", headers={**A, "If-Match": 'W/"1"'})
    assert deleted.status_code == 409
    assert get(client, memory_id)["status"] == "active"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "body"),
        ({"status": "archived"}, "body.status"),
        ({"importance": 11}, "body.importance"),
        ({"pinned": 0}, "body.pinned"),
        ({"event_time": 0}, "body.event_time"),
        ({"content": "   "}, "body.content"),
        ({"content": "x" * 9000}, "body"),
    ],
)
def test_patch_refuses_bad_bodies_and_writes_nothing(
    client: TestClient, body: dict[str, Any], where: str
) -> None:
    memory_id = add(client, "likes green tea")
    response = client.patch(f"/v1/memories/{memory_id}", json=body, headers=A)
    assert response.status_code == 422, response.text
    assert where in problems(response)
    assert get(client, memory_id)["version"] == 1


def test_patch_refuses_a_bad_if_match(client: TestClient) -> None:
    memory_id = add(client, "likes green tea")
    response = client.patch(
        f"/v1/memories/{memory_id}", json={"content": "x"}, headers={**A, "If-Match": "soon"}
    )
    assert response.status_code == 422
    assert problems(response) == ["header.if-match"]


def test_delete_is_a_tombstone_out_of_search_and_undoable(client: TestClient) -> None:
    memory_id = add(client, "the spare key is under the heron statue")
    response = client.delete(f"/v1/memories/{memory_id}", headers=A)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "deleted"
    assert get(client, memory_id)["status"] == "deleted"
    found = client.get("/v1/search", params={"q": "spare key heron"}, headers=A).json()["hits"]
    assert memory_id not in [hit["id"] for hit in found]
    again = client.delete(f"/v1/memories/{memory_id}", headers=A)
    assert again.status_code == 409

    undone = client.post(f"/v1/records/{response.json()['record_id']}/undo", headers=A)
    assert undone.status_code == 200
    assert get(client, memory_id)["status"] == "active"


def test_another_namespaces_memory_is_404_for_edit_delete_and_forget(client: TestClient) -> None:
    theirs = add(client, "belongs to b", headers=B)
    assert (
        client.patch(f"/v1/memories/{theirs}", json={"content": "x"}, headers=A).status_code == 404
    )
    assert client.delete(f"/v1/memories/{theirs}", headers=A).status_code == 404
    forgot = client.post("/v1/forget", json={"ids": [theirs]}, headers=A)
    assert forgot.status_code == 404
    # Naming b's namespace with a's key is not allowed either; for a memory it looks missing.
    named = client.delete(f"/v1/memories/{theirs}", params={"namespace": "b"}, headers=A)
    assert named.status_code == 404
    assert client.post("/v1/forget?namespace=b", json={"all": True}, headers=A).status_code == 403
    (their_record,) = [r["id"] for r in client.get("/v1/records", headers=B).json()["records"]]
    assert client.post(f"/v1/records/{their_record}/undo", headers=A).status_code == 404
    assert get(client, theirs, headers=B)["content"] == "belongs to b"


def test_by_id_routes_find_the_memorys_namespace_for_a_key_with_several(
    client: TestClient,
) -> None:
    memory_id = add(client, "in b", headers=B)
    assert get(client, memory_id, headers=AB)["namespace"] == "b"
    for path in ("history", "relations"):
        assert client.get(f"/v1/memories/{memory_id}/{path}", headers=AB).status_code == 200
    edited = client.patch(f"/v1/memories/{memory_id}", json={"content": "still b"}, headers=AB)
    assert edited.status_code == 200, edited.text
    assert edited.json()["memory"]["namespace"] == "b"
    assert client.delete(f"/v1/memories/{memory_id}", headers=AB).status_code == 200
    # Named, the namespace is the one acted on: there the memory is not.
    named = client.get(f"/v1/memories/{memory_id}", params={"namespace": "a"}, headers=AB)
    assert named.status_code == 404
    # A request that names no memory still needs one namespace.
    assert client.post("/v1/forget", json={"all": True}, headers=AB).status_code == 422


def test_by_id_routes_on_an_open_api_find_any_namespace(tmp_path: Path) -> None:
    store = open_store(tmp_path, keys=())
    with TestClient(create_app(store, start_workers=False)) as open_client:
        added = open_client.post("/v1/memories?namespace=maya", json={"content": "likes tea"})
        memory_id = added.json()["ids"][0]
        edited = open_client.patch(f"/v1/memories/{memory_id}", json={"content": "likes coffee"})
        assert edited.status_code == 200, edited.text
        assert edited.json()["memory"]["namespace"] == "maya"
        assert open_client.get("/v1/memories/999").json()["error"]["message"] == (
            "memory 999 does not exist"
        )
    store.close()


def test_forget_dry_run_then_for_real(client: TestClient) -> None:
    keep = add(client, "walked the dog")
    secret = add(client, "the safe code is 4711", external_id="safe", tags=["private"])
    dry = client.post("/v1/forget", json={"external_ids": ["safe"], "dry_run": True}, headers=A)
    assert dry.status_code == 200, dry.text
    assert dry.json()["record_id"] is None
    assert [m["id"] for m in dry.json()["memories"]] == [secret]
    assert get(client, secret)["content"] == "the safe code is 4711"

    done = client.post("/v1/forget", json={"filter": {"tags": ["private"]}}, headers=A)
    assert done.status_code == 200, done.text
    record_id = done.json()["record_id"]
    assert [m["why"] for m in done.json()["memories"]] == ["asked"]
    assert client.get(f"/v1/memories/{secret}", headers=A).status_code == 404
    found = client.get("/v1/search", params={"q": "safe code"}, headers=A).json()["hits"]
    assert secret not in [hit["id"] for hit in found]
    diff = client.get(f"/v1/records/{record_id}", headers=A).json()
    assert "4711" not in str(diff)
    refused = client.post(f"/v1/records/{record_id}/undo", headers=A)
    assert refused.status_code == 409
    assert "forget" in refused.json()["error"]["message"]
    assert get(client, keep)["status"] == "active"


@pytest.mark.parametrize(
    "body",
    [{}, {"filter": {}}, {"ids": [0]}, {"all": 1}, {"everything": True}, {"filter": {"x": 1}}],
)
def test_forget_refuses_what_names_nothing_or_is_malformed(
    client: TestClient, body: dict[str, Any]
) -> None:
    memory_id = add(client, "stays")
    response = client.post("/v1/forget", json=body, headers=A)
    assert response.status_code == 422, response.text
    assert get(client, memory_id)["content"] == "stays"


def post_lines(
    client: TestClient, *rows: tuple[str, str], headers: dict[str, str] = A
) -> list[int]:
    """Store log lines (session, text), keyed by their text; return their ids."""
    body = [
        {
            "session_id": session,
            "role": "user",
            "content": text,
            "timestamp": f"2026-03-01T1{index}:00:00Z",
            "idempotency_key": text,
        }
        for index, (session, text) in enumerate(rows)
    ]
    response = client.post("/v1/logs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return [int(i) for i in response.json()["ids"]]


def line_ids(store: Store, namespace: str = "a") -> list[int]:
    return [line.id for line in store.db.work.logs_after(namespace, 0, limit=100)]


def test_forget_log_lines_dry_run_then_for_real(client: TestClient, store: Store) -> None:
    ids = post_lines(client, ("s1", "I moved to Porto"), ("s1", "Call Jordan"), ("s2", "jordan"))
    theirs = post_lines(client, ("s1", "b's line"), headers=B)
    chosen = {"log_filter": {"sessions": ["s1"], "match": ["JORDAN"]}}

    dry = client.post("/v1/forget", json={**chosen, "dry_run": True}, headers=A)
    assert dry.status_code == 200, dry.text
    assert (dry.json()["logs"], dry.json()["log_ids"]) == (1, [ids[1]])
    assert line_ids(store) == ids

    done = client.post("/v1/forget", json=chosen, headers=A)
    assert done.status_code == 200, done.text
    assert done.json()["record_id"] is not None
    assert line_ids(store) == [ids[0], ids[2]]
    late = client.post(
        "/v1/forget", json={"log_filter": {"since": "2026-03-01T11:30:00Z"}}, headers=A
    )
    assert late.json()["log_ids"] == [ids[2]]
    everything = client.post("/v1/forget", json={"all": True, "logs": True}, headers=A)
    assert everything.json()["log_ids"] == [ids[0]]
    assert line_ids(store) == []
    assert line_ids(store, "b") == theirs


@pytest.mark.parametrize(
    ("log_filter", "status", "where"),
    [
        ({}, 422, "selection"),
        (
            {"since": "2026-03-02T00:00:00Z", "until": "2026-03-01T00:00:00Z"},
            422,
            "log_filter.since",
        ),
        ({"match": ["   "]}, 422, "body.log_filter.match.0"),
        ({"sessions": [""]}, 422, "body.log_filter.sessions.0"),
        ({"session": ["s1"]}, 422, "body.log_filter.session"),
        ({"keys": ["nope"]}, 404, "body"),
    ],
)
def test_forget_refuses_log_filters_that_make_no_sense(
    client: TestClient, store: Store, log_filter: dict[str, Any], status: int, where: str
) -> None:
    ids = post_lines(client, ("s1", "stays"))
    response = client.post("/v1/forget", json={"log_filter": log_filter}, headers=A)
    assert response.status_code == status, response.text
    assert problems(response)[0] == where
    assert line_ids(store) == ids


def test_undo_of_a_record_that_changed_nothing_is_200_and_writes_nothing(
    client: TestClient, store: Store
) -> None:
    failed = store.db.writer.apply(
        "a",
        "extractor",
        (),
        now=datetime(2026, 5, 1, tzinfo=UTC),
        info=RecordInfo(outcome=Outcome.FAILED, error="ValueError: bad reply"),
    ).record_id
    assert failed is not None
    before = client.get("/v1/records", headers=A).json()

    response = client.post(f"/v1/records/{failed}/undo", headers=A)

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["record_id"], body["undone_id"], body["restored"]) == (None, failed, 0)
    assert "changed nothing that undo could restore" in body["nothing_to_undo"]
    assert client.get("/v1/records", headers=A).json() == before


def test_undo_refused_by_a_later_edit_names_it_and_cascade_undoes_both(client: TestClient) -> None:
    memory_id = add(client, "likes green tea", tags=["drinks"])

    def patch(fields: dict[str, Any]) -> int:
        response = client.patch(f"/v1/memories/{memory_id}", json=fields, headers=A)
        assert response.status_code == 200, response.text
        return int(response.json()["record_id"])

    first = patch({"content": "likes black tea"})
    tagged = patch({"tags": ["drinks", "morning"]})  # another field: no dependency
    second = patch({"content": "likes oolong"})  # the same field: depends on the first

    refused = client.post(f"/v1/records/{first}/undo", headers=A)
    assert refused.status_code == 409, refused.text
    assert f"record.{second}" in problems(refused)
    assert f"record.{tagged}" not in problems(refused)
    assert get(client, memory_id)["content"] == "likes oolong"  # nothing written

    undone = client.post(f"/v1/records/{first}/undo?cascade=true", headers=A)
    assert undone.status_code == 200, undone.text
    assert undone.json()["cascaded"] == [second]
    memory = get(client, memory_id)
    assert (memory["content"], memory["tags"]) == ("likes green tea", ["drinks", "morning"])
    statuses = {
        r["id"]: r["status"] for r in client.get("/v1/records", headers=A).json()["records"]
    }
    assert (statuses[first], statuses[second], statuses[tagged]) == ("undone", "undone", "applied")
