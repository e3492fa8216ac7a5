"""POST /v1/dream and GET /v1/dream/{id}: queueing, namespace rules, validation, and an API
without the daemon running the requests itself (its DreamWorker; that it leaves them to a running
daemon is tested on the worker in test_dream_requests.py)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from store.api.app import create_app
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import Dreamer
from store.coordination.leases import Lease
from store.service import Store
from store.settings import ApiKey, ApiSettings
from tests.helpers.fake_embedder import FakeEmbedder

KEY_A = "key-a-0123456789"
KEY_B = "key-b-0123456789"
KEY_AB = "key-ab-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="agent a"),
    ApiKey(key=KEY_B, namespaces=("b",)),
    ApiKey(key=KEY_AB, namespaces=("a", "b")),
)
JOBS = ("extractor", "linker", "auditor")
WAIT = 10.0


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def open_store(data_dir: Path, keys: tuple[ApiKey, ...] = ()) -> Store:
    settings = Settings(data_dir=data_dir, api=ApiSettings(keys=keys))
    return Store.open(settings, create=True, embedder=FakeEmbedder())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "open")
    yield opened
    opened.close()


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "keyed", KEYS)
    yield opened
    opened.close()


def client_for(store: Store, dreamer: Dreamer | None = None, **kwargs: Any) -> TestClient:
    dreamer = dreamer or Dreamer(jobs=JOBS)
    return TestClient(create_app(store, dreamer=dreamer, start_workers=False, **kwargs))


def test_post_dream_without_daemon_queues_a_request_for_every_namespace(store: Store) -> None:
    with client_for(store) as client:
        response = client.post("/v1/dream")

    assert response.status_code == 202
    body = response.json()
    assert body == {"id": 1, "ids": [1], "daemon_running": False, "note": None}
    request = store.db.dream_requests.get(1)
    assert request is not None
    assert (request.namespace, request.jobs, request.retry_quarantined, request.status) == (
        None,
        (),
        False,
        "pending",
    )
    assert request.requested_by == "api:open"


def test_post_dream_with_daemon_says_it_runs(store: Store) -> None:
    with (
        Lease(store.engine, holder="host:1:daemon", ttl=timedelta(minutes=1)),
        client_for(store) as client,
    ):
        response = client.post(
            "/v1/dream?namespace=maya", json={"jobs": ["auditor"], "retry_quarantined": True}
        )
    assert response.status_code == 202
    assert response.json()["daemon_running"] is True
    request = store.db.dream_requests.get(response.json()["id"])
    assert request is not None
    assert (request.namespace, request.jobs, request.retry_quarantined) == (
        "maya",
        ("auditor",),
        True,
    )


def test_post_dream_unknown_job_or_field_is_refused(store: Store) -> None:
    with client_for(store) as client:
        unknown = client.post("/v1/dream", json={"jobs": ["auditor", "dreamer"]})
        extra = client.post("/v1/dream", json={"job": "auditor"})
        not_bool = client.post("/v1/dream", json={"retry_quarantined": "soon"})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["problems"] == [
        {"where": "body.jobs", "what": "unknown job 'dreamer'"}
    ]
    assert extra.status_code == 422
    assert not_bool.status_code == 422
    assert store.db.dream_requests.recent() == []


def test_post_dream_key_gets_its_namespaces_only(keyed: Store) -> None:
    with client_for(keyed) as client:
        own = client.post("/v1/dream", headers=auth(KEY_A))
        both = client.post("/v1/dream", headers=auth(KEY_AB))
        foreign = client.post("/v1/dream?namespace=b", headers=auth(KEY_A))
        anonymous = client.post("/v1/dream")
    assert own.status_code == 202
    assert both.status_code == 202
    assert foreign.status_code == 404
    assert foreign.json()["error"]["message"] == "namespace 'b' does not exist"
    assert anonymous.status_code == 401
    by_id = {request.id: request.namespace for request in keyed.db.dream_requests.recent()}
    assert by_id[own.json()["id"]] == "a"
    assert [by_id[i] for i in both.json()["ids"]] == ["a", "b"]
    assert len(by_id) == 3  # the refused ones queued nothing
    assert keyed.db.dream_requests.get(own.json()["id"]).requested_by == "api:agent a"  # type: ignore[union-attr]


def test_a_key_without_a_name_is_recorded_by_its_fingerprint(keyed: Store) -> None:
    # KEY_B and KEY_AB have no name and share their first characters ("ke"): the records
    # must tell them apart, and hold no character of either key.
    with client_for(keyed) as client:
        by_b = client.post("/v1/dream", headers=auth(KEY_B)).json()["id"]
        by_ab = client.post("/v1/dream?namespace=a", headers=auth(KEY_AB)).json()["id"]
    names = [keyed.db.dream_requests.get(i).requested_by for i in (by_b, by_ab)]  # type: ignore[union-attr]
    assert names[0] != names[1]
    for name, key in zip(names, (KEY_B, KEY_AB), strict=True):
        assert re.fullmatch(r"api:key-[0-9a-f]{8}", name)
        assert hashlib.sha256(key.encode()).hexdigest().startswith(name.removeprefix("api:key-"))


def test_get_dream_shows_status_and_outcomes_within_the_keys_namespaces(keyed: Store) -> None:
    requests = keyed.db.dream_requests
    with client_for(keyed) as client:
        request_id = client.post("/v1/dream", headers=auth(KEY_A)).json()["id"]
        pending = client.get(f"/v1/dream/{request_id}", headers=auth(KEY_A))
        claimed = requests.claim(picker="p", now=utc_now())
        assert claimed is not None
        outcome = {
            "job": "auditor",
            "namespace": "a",
            "status": "applied",
            "record_id": 4,
            "records": [3, 4],  # a run of two parts names both
            "message": "1 change(s) applied",
        }
        requests.finish(request_id, picker="p", outcomes=[outcome], now=utc_now())
        done = client.get(f"/v1/dream/{request_id}", headers=auth(KEY_A))
        other = client.get(f"/v1/dream/{request_id}", headers=auth(KEY_B))
        missing = client.get("/v1/dream/999", headers=auth(KEY_A))
        bad = client.get("/v1/dream/0", headers=auth(KEY_A))

    assert pending.status_code == 200
    assert (pending.json()["status"], pending.json()["outcomes"]) == ("pending", [])
    assert done.status_code == 200
    body = done.json()
    assert (body["status"], body["picked_by"], body["namespace"]) == ("done", "p", "a")
    assert body["outcomes"] == [outcome]
    assert body["finished_at"] is not None
    assert other.status_code == 404  # another key's request looks missing
    assert other.json() == missing.json() | {
        "error": missing.json()["error"] | {"message": f"dream request {request_id} does not exist"}
    }
    assert missing.status_code == 404
    assert bad.status_code == 422


def test_get_dream_for_every_namespace_is_hidden_from_keys(keyed: Store) -> None:
    request_id = keyed.db.dream_requests.enqueue(
        namespace=None, jobs=(), retry_quarantined=False, requested_by="cli", now=utc_now()
    )
    with client_for(keyed) as client:
        assert client.get(f"/v1/dream/{request_id}", headers=auth(KEY_AB)).status_code == 404


def test_api_without_daemon_runs_requests_itself(store: Store) -> None:
    ran: list[DreamRequestView] = []

    def run(request: DreamRequestView) -> Sequence[Mapping[str, Any]]:
        ran.append(request)
        return [
            {
                "job": job,
                "namespace": request.namespace,
                "status": "nothing",
                "record_id": None,
                "message": "nothing to do",
            }
            for job in request.jobs
        ]

    dreamer = Dreamer(jobs=JOBS, run=run, poll_seconds=0.05, lease_seconds=5)
    app = create_app(store, dreamer=dreamer)
    with TestClient(app) as client:
        accepted = client.post("/v1/dream?namespace=maya", json={"jobs": ["linker", "auditor"]})
        assert accepted.json()["daemon_running"] is False
        url = f"/v1/dream/{accepted.json()['id']}"
        body = wait_until_finished(client, url)
    assert body["status"] == "done"
    assert [outcome["job"] for outcome in body["outcomes"]] == ["linker", "auditor"]
    assert body["picked_by"].count(":") >= 2  # host:pid:uuid of this process's worker
    assert len(ran) == 1


def wait_until_finished(client: TestClient, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(url).json()
        if body["status"] in ("done", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"{url} did not finish within {WAIT} s")
