"""GET /v1/memories (pages), /v1/memories/{id}/relations and /v1/namespaces, and what each
key may see: another namespace's ids answer 404 exactly as missing ones do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from store.api.app import create_app
from store.kinds import MemoryStatus
from store.operations import CreateRelation, SetStatus
from store.service import Store
from tests.store.api.test_api import KEY_AB, T0, A, B, auth, ingest, open_store, problems
from tests.store.api.test_api import app as app  # the fixtures: store, app, client
from tests.store.api.test_api import client as client
from tests.store.api.test_api import store as store

AB = auth(KEY_AB)


@pytest.fixture
def open_client(tmp_path: Path) -> Iterator[TestClient]:
    opened = open_store(tmp_path / "open", keys=())
    with TestClient(create_app(opened, start_workers=False)) as test_client:
        yield test_client
    opened.close()


def page(client: TestClient, headers: dict[str, str] = A, **params: Any) -> Any:
    return client.get("/v1/memories", headers=headers, params=params)


def test_list_memories_pages_with_cursor_to_the_end(client: TestClient) -> None:
    ids = ingest(client, [{"content": f"memory {n}"} for n in range(5)]).json()["ids"]
    first = page(client, limit=2).json()
    assert [m["id"] for m in first["memories"]] == ids[:2]
    assert first["memories"][0]["status"] == "active"
    second = page(client, limit=2, cursor=first["next_cursor"]).json()
    ingest(client, {"content": "added while paging"})
    third = page(client, limit=2, cursor=second["next_cursor"]).json()
    seen = [m["id"] for p in (first, second, third) for m in p["memories"]]
    assert seen == [*ids, ids[-1] + 1]
    assert third["next_cursor"] is None


def test_list_memories_filters(client: TestClient, store: Store) -> None:
    body = [
        {"content": "tea", "type": "preference", "tags": ["drinks"], "metadata": {"src": "chat"}},
        {"content": "hike", "timestamp": "2026-03-01T10:00:00Z", "tags": ["outdoors"]},
        {"content": "old", "timestamp": "2020-01-01T00:00:00Z"},
    ]
    ids = ingest(client, body).json()["ids"]
    archive = SetStatus(memory_id=ids[2], status=MemoryStatus.ARCHIVED)
    store.db.writer.apply("a", "test", [archive], now=T0)

    def listed(**params: Any) -> list[int]:
        response = page(client, **params)
        assert response.status_code == 200, response.json()
        return [m["id"] for m in response.json()["memories"]]

    assert listed() == ids[:2]
    assert listed(type="preference") == [ids[0]]
    assert listed(tag="outdoors") == [ids[1]]
    assert listed(meta="src=chat") == [ids[0]]
    assert listed(status=["archived", "active"], until="2026-01-01T00:00:00Z") == [ids[2]]
    assert listed(since="2026-02-01T00:00:00Z", until="2026-03-02T00:00:00Z") == [ids[1]]


def test_list_memories_bad_parameters_422_named(client: TestClient) -> None:
    response = page(client, cursor="nonsense", status="gone", limit=0)
    assert response.status_code == 422
    wheres = sorted(p.split(":")[0] for p in problems(response))
    assert wheres == ["query.limit", "query.status.0"]
    times = {"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    response = page(client, cursor="nonsense", **times)
    assert sorted(p.split(":")[0] for p in problems(response)) == ["query.cursor", "query.since"]
    response = page(client, meta="no value")
    assert response.status_code == 422
    assert [p.split(":")[0] for p in problems(response)] == ["query.meta.0"]


def test_list_memories_other_namespace_forbidden_own_only(client: TestClient) -> None:
    ingest(client, {"content": "a's"})
    ingest(client, {"content": "b's"}, headers=B)
    assert [m["content"] for m in page(client).json()["memories"]] == ["a's"]
    assert page(client, namespace="b").status_code == 403
    assert page(client, headers=AB).status_code == 422  # two namespaces: name one
    assert [m["content"] for m in page(client, headers=AB, namespace="b").json()["memories"]] == [
        "b's"
    ]


def test_memory_detail_says_what_replaced_it(client: TestClient, store: Store) -> None:
    old, new = ingest(
        client, [{"content": "lives in Oslo"}, {"content": "lives in Bergen"}]
    ).json()["ids"]
    supersede = SetStatus(memory_id=old, status=MemoryStatus.SUPERSEDED, replaced_by=new)
    store.db.writer.apply("a", "test", [supersede], now=T0)
    detail = client.get(f"/v1/memories/{old}", headers=A).json()
    assert (detail["status"], detail["replaced_by"]) == ("superseded", new)
    assert client.get(f"/v1/memories/{new}", headers=A).json()["replaced_by"] is None
    listed = page(client, status="superseded").json()["memories"]
    assert [(m["id"], m["replaced_by"]) for m in listed] == [(old, new)]


def test_relations_both_ways_and_404_for_other_namespace(client: TestClient, store: Store) -> None:
    a, b = ingest(client, [{"content": "rain"}, {"content": "wet streets"}]).json()["ids"]
    (other,) = ingest(client, {"content": "b's"}, headers=B).json()["ids"]
    relation = CreateRelation(source=a, target=b, type="causal", strength=0.9, description="so")
    store.db.writer.apply("a", "test", [relation], now=T0)
    out = client.get(f"/v1/memories/{a}/relations", headers=A).json()
    assert out["memory_id"] == a
    (edge,) = out["relations"]
    assert (edge["direction"], edge["other_id"], edge["type"], edge["strength"]) == (
        "out",
        b,
        "causal",
        0.9,
    )
    assert (edge["description"], edge["other_content"]) == ("so", "wet streets")
    back = client.get(f"/v1/memories/{b}/relations", headers=A).json()["relations"]
    assert [(r["direction"], r["other_id"]) for r in back] == [("in", a)]
    missing = client.get("/v1/memories/999/relations", headers=A)
    foreign = client.get(f"/v1/memories/{other}/relations", headers=A)
    named = client.get(f"/v1/memories/{other}/relations", headers=A, params={"namespace": "b"})
    assert missing.status_code == foreign.status_code == named.status_code == 404
    assert foreign.json()["error"]["message"] == f"memory {other} does not exist"
    assert named.json()["error"]["problems"] == foreign.json()["error"]["problems"]


def test_namespaces_a_key_sees_its_own(client: TestClient) -> None:
    ingest(client, [{"content": "x"}, {"content": "y"}])
    ingest(client, {"content": "z"}, headers=B)
    assert client.get("/v1/namespaces", headers=A).json() == {
        "namespaces": [{"namespace": "a", "memories": 2, "retired": 0, "logs": 0}]
    }
    both = client.get("/v1/namespaces", headers=AB).json()["namespaces"]
    assert [(n["namespace"], n["memories"]) for n in both] == [("a", 2), ("b", 1)]
    assert client.get("/v1/namespaces").status_code == 401


def test_namespaces_open_api_lists_those_with_memories_or_logs(open_client: TestClient) -> None:
    open_client.post("/v1/memories", json={"content": "x"}, params={"namespace": "n1"})
    log = {"session_id": "s", "role": "user", "content": "hi", "timestamp": "2026-01-01T00:00:00Z"}
    open_client.post("/v1/logs", json=log, params={"namespace": "n2"})
    listed = open_client.get("/v1/namespaces").json()["namespaces"]
    assert [(n["namespace"], n["memories"], n["logs"]) for n in listed] == [
        ("n1", 1, 0),
        ("n2", 0, 1),
    ]
