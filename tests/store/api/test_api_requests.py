"""Request hygiene: body size, content type, UTF-8, NaN, the database gone, the OpenAPI
document's security, and which namespace a request without one acts on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from store.api.app import create_app
from store.service import Store
from store.settings import ApiKey, ApiSettings, DatabaseSettings, IngestSettings

KEY = "key-a-0123456789"
KEY_AB = "key-ab-0123456789"
KEYS = (ApiKey(key=KEY, namespaces=("a",)), ApiKey(key=KEY_AB, namespaces=("a", "b")))
A = {"Authorization": f"Bearer {KEY}"}
JSON = {"Content-Type": "application/json"}
LIMIT = 4096


def open_client(settings: Settings) -> Iterator[tuple[TestClient, Store]]:
    store = Store.open(settings, create=True)
    try:
        with TestClient(create_app(store, start_workers=False)) as client:
            yield client, store
    finally:
        store.close()


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    settings = Settings(
        data_dir=tmp_path,
        api=ApiSettings(keys=KEYS, max_body_bytes=LIMIT),
        ingest=IngestSettings(max_metadata_bytes=64),
    )
    yield from open_client(settings)


@pytest.fixture
def client(keyed: tuple[TestClient, Store]) -> TestClient:
    return keyed[0]


def error(response: Any) -> dict[str, Any]:
    """Return the error of a response in the API's one shape (checking the shape)."""
    body = response.json()["error"]
    assert body["status"] == response.status_code
    assert body["message"]
    assert all({"where", "what"} == set(p) for p in body["problems"])
    return dict(body)


def count(store: Store) -> int:
    return store.db.memories.count("a", active_only=False)


def test_body_over_the_limit_is_413_before_reading_it(keyed: tuple[TestClient, Store]) -> None:
    client, store = keyed
    big = b'{"content": "' + b"x" * LIMIT + b'"}'
    response = client.post("/v1/memories", content=big, headers={**A, **JSON})
    assert response.status_code == 413
    assert "api.max_body_bytes" in error(response)["problems"][0]["what"]
    assert count(store) == 0


def test_chunked_body_over_the_limit_is_413(keyed: tuple[TestClient, Store]) -> None:
    client, store = keyed

    def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts as it reads
        yield b'{"content": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    response = client.post("/v1/memories", content=chunks(), headers={**A, **JSON})
    assert response.status_code == 413
    assert count(store) == 0


def test_body_at_the_limit_is_accepted(client: TestClient) -> None:
    body = b'{"content": "' + b"x" * (LIMIT - 20) + b'"}'
    assert len(body) <= LIMIT
    response = client.post("/v1/memories", content=body, headers={**A, **JSON})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "content_type",
    ["", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
def test_body_not_declared_json_is_415(keyed: tuple[TestClient, Store], content_type: str) -> None:
    client, store = keyed
    headers = {**A, "Content-Type": content_type} if content_type else A
    response = client.post("/v1/memories", content=b'{"content": "x"}', headers=headers)
    assert response.status_code == 415
    assert error(response)["problems"][0]["what"].endswith(("send application/json", "send UTF-8"))
    assert count(store) == 0


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"],
)
def test_json_content_types_are_accepted(client: TestClient, content_type: str) -> None:
    response = client.post(
        "/v1/memories", content=b'{"content": "x"}', headers={**A, "Content-Type": content_type}
    )
    assert response.status_code == 201


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/logs", "/v1/dream"])
def test_invalid_utf8_body_is_400_naming_the_byte(
    keyed: tuple[TestClient, Store], path: str
) -> None:
    client, store = keyed
    response = client.post(path, content=b'{\n  "content": "caf\xe9"}', headers={**A, **JSON})
    assert response.status_code == 400
    assert error(response)["problems"][0]["what"] == "line 2 column 18: byte 0xe9 is not UTF-8"
    assert count(store) == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"content": "x", "metadata": {"score": NaN}}',
        b'{"content": "x", "metadata": {"score": -Infinity}}',
        b'{"content": "x", "metadata": {"deep": [1, {"n": 1e999}]}}',
        b'{"jobs": [], "retry_quarantined": NaN}',
    ],
)
def test_nan_and_infinities_are_refused_in_any_body(
    keyed: tuple[TestClient, Store], body: bytes
) -> None:
    client, store = keyed
    path = "/v1/dream" if b"jobs" in body else "/v1/memories"
    response = client.post(path, content=body, headers={**A, **JSON})
    assert response.status_code == 400
    assert "finite" in error(response)["problems"][0]["what"]
    assert count(store) == 0


def test_nan_query_float_is_422(client: TestClient) -> None:
    for value in ("nan", "inf", "-Infinity"):
        response = client.get("/v1/search", params={"q": "x", "min_score": value}, headers=A)
        assert response.status_code == 422, value
        error(response)


def test_metadata_over_its_limit_is_refused_naming_the_item(
    keyed: tuple[TestClient, Store],
) -> None:
    client, store = keyed
    body = [{"content": "fine"}, {"content": "x", "metadata": {"notes": "y" * 100}}]
    response = client.post("/v1/memories", json=body, headers=A)
    assert response.status_code == 422
    (problem,) = error(response)["problems"]
    assert problem["where"] == "item 1"
    assert "ingest.max_metadata_bytes" in problem["what"]
    assert count(store) == 0


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"content": "x", "pinned": 0}, "pinned"),
        ({"content": "x", "pinned": "yes"}, "pinned"),
        ({"content": "x", "timestamp": 0}, "timestamp"),
        ({"content": "x", "timestamp": "1700000000"}, "timestamp"),
        ({"content": "x", "importance": "7"}, "importance"),
        ({"content": "x", "importance": True}, "importance"),
        ({"content": "x", "tags": [""]}, "tags"),
        ({"content": "   "}, "content"),
    ],
)
def test_lax_values_the_schema_does_not_allow_are_refused(
    keyed: tuple[TestClient, Store], item: dict[str, Any], field: str
) -> None:
    client, store = keyed
    response = client.post("/v1/memories", json=item, headers=A)
    assert response.status_code == 422
    assert any(
        p["where"].startswith(f"body: {field}") or field in p["what"]
        for p in error(response)["problems"]
    )
    assert count(store) == 0


def test_write_without_namespace_from_a_key_with_several_names_them(
    keyed: tuple[TestClient, Store],
) -> None:
    client, store = keyed
    headers = {"Authorization": f"Bearer {KEY_AB}"}
    response = client.post("/v1/memories", json={"content": "x"}, headers=headers)
    assert response.status_code == 422
    (problem,) = error(response)["problems"]
    assert problem["where"] == "query.namespace"
    assert "(a, b)" in problem["what"]
    assert store.db.work.namespaces_with_work() == []


def test_write_without_namespace_on_an_open_api_goes_to_default(tmp_path: Path) -> None:
    for client, store in open_client(Settings(data_dir=tmp_path)):
        response = client.post("/v1/memories", json={"content": "x"})
        assert response.status_code == 201
        assert store.db.work.namespaces_with_work() == ["default"]


def test_database_gone_answers_503_in_the_error_shape(tmp_path: Path) -> None:
    # A PostgreSQL server that is not there: every request that needs the database fails.
    settings = Settings(
        data_dir=tmp_path, database=DatabaseSettings(url="postgresql://u@127.0.0.1:1/db")
    )
    store = Store(settings)
    try:
        with TestClient(create_app(store, start_workers=False)) as client:
            for method, path in [
                ("GET", "/v1/search?q=cat"),
                ("GET", "/v1/memories/1"),
                ("GET", "/v1/records"),
                ("GET", "/v1/status"),
                ("POST", "/v1/memories"),
            ]:
                body = {"content": "x"} if method == "POST" else None
                response = client.request(method, path, json=body)
                assert response.status_code == 503, (path, response.text)
                assert error(response)["message"].startswith("the database is unavailable")
                assert response.headers["Retry-After"] == "5"
            assert client.get("/healthz").status_code == 503
    finally:
        store.close()


def test_openapi_declares_bearer_and_x_api_key(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearerAuth"]["description"],
    }
    assert (schemes["apiKeyAuth"]["in"], schemes["apiKeyAuth"]["name"]) == ("header", "X-API-Key")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path.startswith("/v1/"):
                assert operation["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}], path
                assert {"401", "422", "503"} <= set(operation["responses"]), (method, path)
            else:
                assert "security" not in operation, path


def test_openapi_of_an_open_api_requires_no_key(tmp_path: Path) -> None:
    for client, _ in open_client(Settings(data_dir=tmp_path)):
        document = client.get("/openapi.json").json()
        assert "securitySchemes" in document["components"]
        assert all(
            "security" not in operation
            for operations in document["paths"].values()
            for operation in operations.values()
        )


def test_openapi_declares_the_configured_sizes_and_the_app_holds_to_them(tmp_path: Path) -> None:
    limits = IngestSettings(max_content_chars=50, max_tags=2, max_tag_chars=8, max_batch=3)
    for client, _ in open_client(Settings(data_dir=tmp_path, ingest=limits)):
        document = client.get("/openapi.json").json()
        post = document["paths"]["/v1/memories"]["post"]["requestBody"]["content"]
        one, many, wrapped = post["application/json"]["schema"]["anyOf"]
        patch = document["components"]["schemas"]["MemoryPatch"]["properties"]
        patch_tags = next(o for o in patch["tags"]["anyOf"] if o.get("type") == "array")
        for tags in (one["properties"]["tags"], patch_tags):
            assert (tags["maxItems"], tags["items"]["maxLength"]) == (2, 8)
        assert one["properties"]["content"]["maxLength"] == 50
        assert many["maxItems"] == wrapped["properties"]["items"]["maxItems"] == 3
        # What the document allows is taken; one character or one tag more is refused.
        at_limit = {"content": "c" * 50, "tags": ["t" * 8, "u" * 8]}
        created = client.post("/v1/memories", json=at_limit)
        assert created.status_code == 201, created.text
        memory_id = created.json()["ids"][0]
        edited = client.patch(f"/v1/memories/{memory_id}", json={"tags": ["v" * 8]})
        assert edited.status_code == 200, edited.text
        for over in ({"tags": ["v" * 9]}, {"tags": ["a", "b", "c"]}, {"content": "c" * 51}):
            refused = client.patch(f"/v1/memories/{memory_id}", json=over)
            assert refused.status_code == 422, (over, refused.text)


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def test_readme_lists_every_endpoint(tmp_path: Path) -> None:
    store = Store(Settings(data_dir=tmp_path))
    try:
        paths = create_app(store, start_workers=False).openapi()["paths"]
    finally:
        store.close()
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    # Each endpoint as `METHOD /path` (a row may name several: "`GET /healthz`, `GET /readyz`").
    listed = {
        (method, _shape(path))
        for method, path in re.findall(r"`(GET|POST|PATCH|PUT|DELETE) (/[^`?\s]*)", readme)
    }
    missing = [
        f"{method.upper()} {path}"
        for path, operations in paths.items()
        for method in operations
        if (method.upper(), _shape(path)) not in listed
    ]
    assert missing == []
