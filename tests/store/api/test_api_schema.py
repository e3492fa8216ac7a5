"""The API does what its OpenAPI document says (schemathesis over every operation, with and
without a key): no 5xx, every answer documented and in its schema, invalid input refused, and a
refused request writes nothing."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks

from secretary.config import Settings
from store.api.app import create_app
from store.service import Store
from store.settings import ApiKey, ApiSettings

KEY_A = "key-a-0123456789"
KEY_AB = "key-ab-0123456789"
KEYS = (ApiKey(key=KEY_A, namespaces=("a",)), ApiKey(key=KEY_AB, namespaces=("a", "b")))
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Examples per operation and mode; with ~20 operations, a few hundred calls in all.
EXAMPLES = 12


class Seeded:
    """A store with memories, logs and records in two namespaces, and the app over it."""

    def __init__(self, data_dir: Path) -> None:
        self.store = Store.open(
            Settings(data_dir=data_dir, api=ApiSettings(keys=KEYS)), create=True
        )
        for namespace in ("a", "b"):
            self.store.add_memories(
                namespace,
                [
                    {"content": f"{namespace}: Maya adopted a cat", "tags": ["pets"]},
                    {"content": f"{namespace}: likes tea", "type": "preference"},
                ],
                now=NOW,
            )
            self.store.add_logs(
                namespace,
                [{"session_id": "s", "role": "user", "content": "hi", "timestamp": NOW}],
                now=NOW,
            )
        self.app: FastAPI = create_app(self.store, start_workers=False, clock=lambda: NOW)

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a request could write: memories, relations, logs, records, requests."""
        db = self.store.db
        namespaces = db.work.namespaces_with_work()
        exports = {ns: list(db.memories.export(ns)) for ns in namespaces}
        records = [r.id for r in db.records.find(limit=10_000)]
        return exports, records, len(db.dream_requests.recent()), db.work.outbox_size()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    seeded = Seeded(tmp_path_factory.mktemp("schema"))
    yield seeded
    seeded.store.close()


@pytest.fixture(scope="module")
def api_schema(seeded: Seeded) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", seeded.app)


def _document() -> dict[str, Any]:
    """The OpenAPI document of an app over a store never opened."""
    with tempfile.TemporaryDirectory() as place:
        store = Store(Settings(data_dir=Path(place), api=ApiSettings(keys=KEYS)))
        try:
            document: dict[str, Any] = create_app(store, start_workers=False).openapi()
        finally:
            store.close()
    return document


def _operations() -> list[Any]:
    """Every operation of the OpenAPI document with its generation modes (negative ones only
    where it has something to get wrong)."""
    paths = _document()["paths"]
    found = []
    for path, operations in paths.items():
        for method, operation in operations.items():
            found.append(pytest.param(method.upper(), path, GenerationMode.POSITIVE))
            if operation.get("parameters") or operation.get("requestBody"):
                found.append(pytest.param(method.upper(), path, GenerationMode.NEGATIVE))
    return found


AUTH = ("authorization", "x-api-key")
# No key and a wrong one (401 on every /v1 operation), then a key by either scheme.
CALLERS = (
    {},
    {"X-API-Key": "not-a-key-0123456789"},
    {"Authorization": f"Bearer {KEY_A}"},
    {"X-API-Key": KEY_A},
)
# Refusals of schema-valid requests that no JSON schema can express, each named (where, what):
# a cursor the API did not give out, since after until, an edit whose fields are all null, a
# forget that selects nothing. Any other refusal of a valid request is a mismatch.
SEMANTIC = {
    ("query.cursor", "not a cursor this API gave out"),
    ("query.since", "is after until"),
    ("log_filter.since", "is after until"),
    ("body", "names no field to change"),
    ("selection", "name ids, external ids, a filter, log lines, or all"),
    ("body.on_conflict", "disagrees with the on_conflict query parameter"),
}
# How a valid request is refused as invalid (a valid one may also meet 401, 403, 404, 409).
INVALID = {400, 413, 415, 422}


def refused_for_no_reason(response: Any) -> list[tuple[str, str]]:
    """The problems of a refused valid request that are not SEMANTIC ones."""
    if response.status_code not in INVALID:
        return []
    problems = response.json()["error"]["problems"]
    found = [(p["where"], p["what"]) for p in problems]
    return [problem for problem in found if problem not in SEMANTIC] or (
        [] if found else [("", response.text)]
    )


@pytest.mark.parametrize(("method", "path", "mode"), _operations())
def test_api_matches_its_openapi_document(
    api_schema: Any, seeded: Seeded, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]
    keyed = path.startswith("/v1/")

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        # A failure is reported with its request as found: shrinking would multiply the calls.
        phases=[Phase.explicit, Phase.generate],
    )
    def check(case: Any) -> None:
        generated = {k: v for k, v in (case.headers or {}).items() if k.lower() not in AUTH}
        for caller in CALLERS:
            case.headers = {**generated, **caller}
            before = seeded.snapshot()
            response = case.call()
            # 5xx never, but for a probe (healthz, readyz) saying "not ready" as it documents.
            probe = not keyed and response.status_code == 503
            assert response.status_code < 500 or probe, (response.status_code, response.text)
            if keyed and KEY_A not in str(caller):
                assert response.status_code == 401, response.text
            # Checked here instead: not_a_server_error (probes), ignored_auth (it takes a key in
            # the case's headers for a generated, invalid one) and positive_data_acceptance (it
            # knows no SEMANTIC refusal).
            excluded = [checks.not_a_server_error, checks.ignored_auth]
            case.validate_response(
                response, excluded_checks=[*excluded, checks.positive_data_acceptance]
            )
            if mode is GenerationMode.POSITIVE:
                assert refused_for_no_reason(response) == [], (
                    case.as_curl_command(),
                    response.text,
                )
            if response.status_code >= 400:
                assert seeded.snapshot() == before, (response.status_code, response.text)

    check()


def test_one_record_schema_for_every_route_that_answers_records() -> None:
    document = _document()
    names = [name for name in document["components"]["schemas"] if "RecordOut" in name]
    assert names == ["RecordOut"]  # not one per module (store__api__RecordOut, ...)
    listed = ("/v1/records", "RecordsOut"), ("/v1/memories/{memory_id}/history", "HistoryOut")
    for path, model in listed:
        answer = document["paths"][path]["get"]["responses"]["200"]["content"]
        assert answer["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
        items = document["components"]["schemas"][model]["properties"]["records"]["items"]
        assert items == {"$ref": "#/components/schemas/RecordOut"}
