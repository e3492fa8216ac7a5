"""The Python client against a real API server on 127.0.0.1 (uvicorn in a thread, a SQLite
store in tmp_path, the fake embedder): every endpoint, sync and async, and its errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from secretary.client import (
    AsyncSecretaryClient,
    Calls,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Invalid,
    NotFound,
    SecretaryClient,
    SecretaryError,
    ServerError,
    StaleVersion,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from secretary.client.calls import answer
from secretary.client.errors import error_from
from secretary.config import Settings
from store.api.app import create_app
from store.service import Store
from store.settings import ApiKey, ApiSettings
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.live_server import live_server
from tests.secretary.test_daemon import free_port

KEY_A = "key-a-0123456789"
KEY_B = "key-b-0123456789"
KEY_AB = "key-ab-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="agent a"),
    ApiKey(key=KEY_B, namespaces=("b",), name="agent b"),
    ApiKey(key=KEY_AB, namespaces=("a", "b")),
)
MAX_BODY = 64 * 1024
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    settings = Settings(data_dir=tmp_path, api=ApiSettings(keys=KEYS, max_body_bytes=MAX_BODY))
    opened = Store.open(settings, create=True, embedder=FakeEmbedder())
    yield opened
    opened.close()


@pytest.fixture
def url(store: Store) -> Iterator[str]:
    with live_server(create_app(store)) as base_url:
        yield base_url


@pytest.fixture
def client(url: str) -> Iterator[SecretaryClient]:
    with SecretaryClient(url, api_key=KEY_A) as opened:
        yield opened


def seed(client: SecretaryClient) -> list[int]:
    result = client.add_memories(
        [
            {
                "content": "Maya adopted a rescue cat named Pepper",
                "tags": ["pets"],
                "timestamp": T0,
            },
            {"content": "Maya ran the city half marathon in 1:58", "external_id": "run-1"},
            {"content": "Maya prefers green tea over coffee", "type": "preference"},
        ]
    )
    return list(result.ids)


# -- sync: every endpoint ----------------------------------------------------------------------


def test_client_add_search_get_list_and_paging(client: SecretaryClient) -> None:
    ids = seed(client)
    assert len(ids) == 3
    again = client.add_memory("Maya prefers green tea over coffee", type="preference")
    assert again.created == ()
    assert again.ids == (ids[2],)

    found = client.search("what is the cat called?", k=3, reinforce=False)
    assert found.hits[0].id == ids[0]
    top = found.hits[0]
    assert top.breakdown.score == pytest.approx(top.score)
    assert top.breakdown.relevance > 0
    assert top.via in ("anchor", "spread")
    assert top.event_time == T0
    assert top.tags == ("pets",)
    only_pets = client.search("Maya", tags=["pets"], since=T0, meta={}, min_score=0.0)
    assert [hit.id for hit in only_pets.hits] == [ids[0]]

    memory = client.get(ids[1])
    assert (memory.external_id, memory.namespace, memory.status) == ("run-1", "a", "active")
    assert memory.version == 1
    assert memory.replaced_by is None
    assert [r.job for r in client.history(ids[1])] == ["ingest"]
    assert client.relations(ids[1]) == ()

    first = client.list_memories(limit=2)
    assert [m.id for m in first.memories] == ids[:2]
    assert first.next_cursor is not None
    client.add_memory("Maya planted tomatoes")  # paging is stable while memories arrive
    assert next(m.id for m in client.list_memories(first.next_cursor, limit=2).memories) == ids[2]
    every = list(client.iter_memories(limit=2))
    assert [m.id for m in every] == [*ids, ids[2] + 1]
    assert [m.id for m in client.iter_memories(types=["preference"])] == [ids[2]]
    assert {(n.namespace, n.memories) for n in client.namespaces()} == {("a", 4)}


def test_client_recall_answers_what_an_agent_needs(client: SecretaryClient) -> None:
    ids = seed(client)
    found = client.search("what is the cat called?", k=3, reinforce=False)
    # min_score 0: the hits themselves (this store's embedder hashes words: no real cosines)
    recall = client.recall("what is the cat called?", k=3, reinforce=False, min_score=0)
    assert [hit.id for hit in recall.hits] == [hit.id for hit in found.hits]
    top, full = recall.hits[0], found.hits[0]
    assert (top.id, top.text, top.type, top.time) == (ids[0], full.content, "event", T0)
    assert top.score == round(full.breakdown.relevance, 2)
    assert top.breakdown is None
    assert top.line == f"#{ids[0]} event 2026-03-01 {top.score:.2f} {full.content}"
    assert recall.lines().splitlines()[0] == top.line
    detailed = client.recall(
        "what is the cat called?", k=3, reinforce=False, detail=True, min_score=0
    )
    breakdown = detailed.hits[0].breakdown
    assert breakdown is not None
    assert breakdown.relevance == full.breakdown.relevance  # recency moves with the clock
    assert breakdown.match == full.breakdown.match > 0


def test_client_recall_answers_nothing_when_nothing_is_relevant(client: SecretaryClient) -> None:
    seed(client)
    assert client.search("stock portfolio dividends", reinforce=False).hits  # k hits, as ever
    assert client.recall("stock portfolio dividends", reinforce=False).hits == ()
    assert client.recall("stock portfolio dividends", reinforce=False, min_score=0).hits
    found = client.recall("Maya adopted a rescue cat named Pepper", reinforce=False).hits
    assert found[0].text == "Maya adopted a rescue cat named Pepper"


def test_client_agents_threshold_is_the_stores() -> None:
    from secretary.client.calls import AGENT_MIN_SCORE
    from store.settings import AGENT_MIN_SCORE as STORES

    assert AGENT_MIN_SCORE == STORES


def test_client_longest_query_is_the_apis() -> None:
    from secretary.client.calls import MAX_QUERY_CHARS
    from store.api.routes_search import MAX_QUERY_CHARS as APIS

    assert MAX_QUERY_CHARS == APIS


def test_client_update_delete_undo_and_stale_version(client: SecretaryClient) -> None:
    memory_id = seed(client)[2]
    edited = client.update(memory_id, version=1, content="Maya prefers black tea", importance=8)
    assert (edited.memory.content, edited.memory.version) == ("Maya prefers black tea", 2)
    assert edited.record_id is not None

    with pytest.raises(StaleVersion) as stale:  # version 1 was read before the edit
        client.update(memory_id, version=1, content="Maya prefers coffee")
    assert stale.value.status == 409
    assert [p.where for p in stale.value.problems] == ["header.if-match"]
    assert "now at version 2" in stale.value.problems[0].what
    assert client.get(memory_id).content == "Maya prefers black tea"  # nothing changed

    with pytest.raises(StaleVersion):
        client.delete(memory_id, version=1)
    deleted = client.delete(memory_id, version=2)
    assert (deleted.id, deleted.status) == (memory_id, "deleted")
    assert client.get(memory_id).status == "deleted"
    assert [r.job for r in client.history(memory_id)] == ["ingest", "edit", "delete"]

    undone = client.undo(deleted.record_id)
    assert undone.undone_id == deleted.record_id
    assert undone.restored >= 1
    assert client.get(memory_id).status == "active"
    with pytest.raises(Conflict) as twice:
        client.undo(deleted.record_id)
    assert twice.value.problems


def test_client_undo_names_a_dependent_and_cascades_over_http(client: SecretaryClient) -> None:
    memory_id = seed(client)[2]
    first = client.update(memory_id, content="Maya prefers black tea").record_id
    second = client.update(memory_id, content="Maya prefers oolong").record_id
    assert first is not None
    assert second is not None
    with pytest.raises(Conflict) as refused:
        client.undo(first)
    assert f"record.{second}" in [p.where for p in refused.value.problems]
    assert "--cascade" in str(refused.value)
    undone = client.undo(first, cascade=True)
    assert (undone.undone_id, undone.cascaded) == (first, (second,))
    assert client.get(memory_id).content == "Maya prefers green tea over coffee"


def test_client_forget_dry_run_then_for_real(client: SecretaryClient) -> None:
    ids = seed(client)
    planned = client.forget(external_ids=["run-1"], dry_run=True)
    assert planned.dry_run
    assert planned.record_id is None
    assert [m.id for m in planned.memories] == [ids[1]]
    assert client.get(ids[1]).status == "active"  # a dry run erases nothing

    done = client.forget(external_ids=["run-1"])
    assert done.record_id is not None
    assert [m.id for m in done.memories] == [ids[1]]
    with pytest.raises(NotFound):
        client.get(ids[1])
    by_filter = client.forget(filter={"tags": ["pets"]}, dry_run=True)
    assert [m.id for m in by_filter.memories] == [ids[0]]
    with pytest.raises(Conflict):  # an erasure cannot be undone
        client.undo(done.record_id)


def test_client_records_logs_dream_status_health_metrics(client: SecretaryClient) -> None:
    seed(client)
    logs = client.add_logs(
        [{"session_id": "s1", "role": "user", "content": "I adopted a cat!", "timestamp": T0}]
    )
    assert len(logs.created) == 1

    records = client.records(limit=5)
    assert records[0].job == "ingest"
    assert records[0].namespace == "a"
    detail = client.record(records[0].id)
    assert detail.operations
    assert detail.operations[0].target_kind == "memory"
    assert client.record_diff(records[0].id).lines

    accepted = client.dream(jobs=["linker"])
    request = client.dream_request(accepted.id)
    assert request.jobs == ("linker",)
    assert request.namespace == "a"
    assert request.status in ("pending", "running", "done", "failed")

    status = client.status()
    assert [n["namespace"] for n in status["namespaces"]] == ["a"]
    health = client.health()
    assert (health.status, health.database) == ("ok", "ok")
    assert health.vector_index is not None
    assert health.lexical_index is not None
    assert client.ready() is health.warm
    assert "secretary_" in client.metrics()


# -- errors ------------------------------------------------------------------------------------


def test_client_errors_carry_the_problem_list(client: SecretaryClient, url: str) -> None:
    with pytest.raises(Invalid) as bad:
        client.add_memories([{"content": "fine"}, {"content": "x", "importance": 11}])
    assert bad.value.status == 422
    assert any(p.where.startswith("items.1") for p in bad.value.problems), bad.value.problems
    assert "items.1" in str(bad.value)

    client.add_memory("Maya ran a marathon", external_id="run-1")
    with pytest.raises(Conflict) as conflict:
        client.add_memory("Maya walked a marathon", external_id="run-1")
    assert conflict.value.problems
    assert not isinstance(conflict.value, StaleVersion)
    updated = client.add_memory("Maya walked a marathon", external_id="run-1", on_conflict="update")
    assert updated.updated == updated.ids

    with pytest.raises(Invalid):
        client.search("tea", k=0)
    with pytest.raises(Invalid):  # NaN is refused before anything is sent
        client.add_memory("nan", metadata={"x": float("nan")})
    with pytest.raises(TooLarge) as large:
        client.add_memory("x" * 100, metadata={"blob": "y" * MAX_BODY})
    assert large.value.status == 413
    assert "api.max_body_bytes" in str(large.value.problems[0])

    stranger = SecretaryClient(url, api_key="not-a-key-at-all")
    with stranger, pytest.raises(Unauthorized) as unknown:
        stranger.search("tea")
    assert unknown.value.problems[0].where == "header.authorization"
    with pytest.raises(Forbidden):
        client.search("tea", namespace="b")
    with SecretaryClient(url, api_key=KEY_AB) as both, pytest.raises(Invalid) as which:
        both.search("tea")  # a key with two namespaces must name one
    assert which.value.problems[0].where == "query.namespace"


def test_client_other_namespaces_memory_is_not_found(client: SecretaryClient, url: str) -> None:
    memory_id = seed(client)[0]
    with SecretaryClient(url, api_key=KEY_B) as other:
        for attempt in (
            lambda: other.get(memory_id),
            lambda: other.history(memory_id),
            lambda: other.relations(memory_id),
            lambda: other.update(memory_id, content="mine now"),
            lambda: other.delete(memory_id),
            lambda: other.forget(ids=[memory_id], dry_run=True),
            lambda: other.get(memory_id, namespace="a"),
        ):
            with pytest.raises(NotFound):
                attempt()
        assert other.list_memories().memories == ()
        assert other.records() == ()
        with pytest.raises(NotFound):
            other.record(client.records()[0].id)
    assert client.get(memory_id).content == "Maya adopted a rescue cat named Pepper"


def test_client_unreachable_server_raises_connection_failed() -> None:
    nobody = SecretaryClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with nobody, pytest.raises(ConnectionFailed) as failed:
        nobody.health()
    assert failed.value.status is None
    assert "cannot reach" in str(failed.value)


def test_client_query_too_long_for_a_url_is_invalid_not_sent() -> None:
    # httpx refuses a URL query over 64 KiB before sending: a SecretaryError like any refusal
    # (the API itself answers 422 above 4,000 characters), for both clients.
    nobody = f"http://127.0.0.1:{free_port()}"
    with SecretaryClient(nobody) as sync, pytest.raises(Invalid) as refused:
        sync.search("x" * 70_000)
    assert "not sent" in str(refused.value)

    async def search() -> None:
        async with AsyncSecretaryClient(nobody) as client:
            await client.search("x" * 70_000)

    with pytest.raises(Invalid):
        asyncio.run(search())


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, Invalid), (404, NotFound), (413, TooLarge), (503, Unavailable), (500, ServerError)],
)
def test_error_from_status_picks_the_subclass(status: int, kind: type[SecretaryError]) -> None:
    body = b'{"error": {"status": 1, "message": "no", "problems": [{"where": "w", "what": "x"}]}}'
    error = error_from(status, body)
    assert type(error) is kind
    assert error.message == "no"
    assert str(error.problems[0]) == "w: x"
    assert type(error_from(status, b"<html>proxy</html>")) is kind
    with pytest.raises(kind):
        answer(Calls().get(1), status, body)


# -- async: every endpoint ---------------------------------------------------------------------


def test_async_client_covers_every_endpoint(url: str) -> None:
    asyncio.run(_async_tour(url))


async def _async_tour(url: str) -> None:
    async with AsyncSecretaryClient(url, api_key=KEY_AB, namespace="a") as client:
        added = await client.add_memories(
            [{"content": "Maya adopted a cat named Pepper"}, {"content": "Maya likes green tea"}]
        )
        cat, tea = added.ids
        assert (await client.add_memory("Maya bought a bike", namespace="b")).created
        assert (await client.add_logs([{"session_id": "s", "role": "user", "content": "hi",
                                        "timestamp": T0}])).created  # fmt: skip
        hits = (await client.search("cat called Pepper", k=2)).hits
        assert hits[0].id == cat
        assert hits[0].breakdown.lexical > 0
        brief = (await client.recall("cat called Pepper", k=2, reinforce=False)).hits[0]
        assert (brief.id, brief.text, brief.breakdown) == (
            cat,
            "Maya adopted a cat named Pepper",
            None,
        )
        assert (await client.get(cat)).version == 1
        assert [m.id async for m in client.iter_memories(limit=1)] == [cat, tea]
        assert (await client.list_memories(limit=5, namespace="b")).memories[0].namespace == "b"
        assert {n.namespace for n in await client.namespaces()} == {"a", "b"}
        assert await client.relations(cat) == ()

        edited = await client.update(tea, version=1, tags=["drinks"])
        assert edited.memory.version == 2
        assert edited.memory.tags == ("drinks",)
        with pytest.raises(StaleVersion):
            await client.update(tea, version=1, pinned=True)
        deleted = await client.delete(tea, version=2)
        assert [r.job for r in await client.history(tea)] == ["ingest", "edit", "delete"]
        assert (await client.undo(deleted.record_id)).restored >= 1
        dry = await client.forget(ids=[cat], dry_run=True)
        assert [m.id for m in dry.memories] == [cat]
        assert (await client.get(cat)).status == "active"
        assert (await client.forget(ids=[cat])).record_id is not None
        with pytest.raises(NotFound):
            await client.get(cat)

        records = await client.records(limit=50)
        assert {r.job for r in records} >= {"ingest", "edit", "delete", "undo"}
        assert (await client.record(records[-1].id)).operations
        assert (await client.record_diff(records[-1].id)).lines
        accepted = await client.dream()
        assert (await client.dream_request(accepted.id)).namespace == "a"
        assert (await client.status())["namespaces"]
        assert (await client.health()).database == "ok"
        assert "secretary_" in await client.metrics()

    async with AsyncSecretaryClient(url, api_key=KEY_B) as other:
        with pytest.raises(NotFound):
            await other.get(tea)
    async with AsyncSecretaryClient(f"http://127.0.0.1:{free_port()}", timeout=2) as nobody:
        with pytest.raises(ConnectionFailed):
            await nobody.health()


def test_client_reads_an_undo_that_had_nothing_to_undo_and_a_run_of_two_records() -> None:
    from secretary.client.models import DreamOutcome, UndoResult, parse

    answer = {"record_id": None, "undone_id": 7, "restored": 0, "skipped": []}
    nothing = parse(UndoResult, answer | {"nothing_to_undo": "record 7 (failed) changed nothing"})
    outcome = parse(
        DreamOutcome,
        {
            "job": "linker",
            "namespace": "a",
            "status": "applied",
            "record_id": 3,
            "message": "",
            "records": [3, 4],
        },
    )

    assert (nothing.record_id, nothing.nothing_to_undo) == (
        None,
        "record 7 (failed) changed nothing",
    )
    assert outcome.records == (3, 4)
