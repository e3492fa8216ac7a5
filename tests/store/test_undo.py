"""Undo of maintenance records: exact round trips, conflicts, undo of undo, the index, the API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from secretary.config import ApiKey, ApiSettings, Settings
from store.api import create_app
from store.api.records import router
from store.apply import apply_operations
from store.errors import NotFound
from store.models import MemoryStatus, RecordStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.repository import Repository
from store.schemas import MemoryIn
from store.service import Store
from store.undo import (
    AlreadyUndone,
    NothingToUndo,
    UndoConflict,
    find_records,
    plan_undo,
    undo,
)
from tests.store.test_repository import timeline

NOW = datetime(2026, 2, 1, tzinfo=UTC)
LATER = NOW + timedelta(days=3)
HOUR = timedelta(hours=1)


def export(repo: Repository, namespace: str = "ns") -> list[str]:
    return list(repo.export(namespace))


def seed(repo: Repository, count: int = 5, *, namespace: str = "ns") -> tuple[int, ...]:
    items = [
        MemoryIn(content=f"fragment {i}", timestamp=NOW + i * HOUR, session_id="s")
        for i in range(count)
    ]
    return repo.add_memories(namespace, items, now=NOW).ids


def consolidation(fragments: tuple[int, ...]) -> list[Operation]:
    """A summary taking the fragments' timeline place, inheriting their relations."""
    return [
        CreateMemory(
            key="summary",
            content="the fragments, summarised",
            type="interaction_summary",
            event_time=NOW + HOUR,
            replaces_in_timeline=fragments,
        ),
        InheritRelations(from_ids=fragments, to="summary"),
        *[
            CreateRelation(source="summary", target=f, type="derived_from", strength=1.0)
            for f in fragments
        ],
        *[
            SetStatus(memory_id=f, status=MemoryStatus.MERGED, replaced_by="summary")
            for f in fragments
        ],
    ]


def applied(repo: Repository, job: str, ops: list[Operation]) -> int:
    record_id = apply_operations(repo, "ns", job, ops, now=LATER).record_id
    assert record_id is not None
    return record_id


# -- round trips -------------------------------------------------------------------------------


def test_undo_ingest_into_timeline_restores_export(repo: Repository) -> None:
    seed(repo, 3)
    before = export(repo)
    items = [
        MemoryIn(content="between", timestamp=NOW + HOUR / 2, external_id="e1"),
        MemoryIn(content="last", timestamp=NOW + 9 * HOUR),
    ]
    added = repo.add_memories("ns", items, now=LATER)
    assert added.record_id is not None
    result = undo(repo, added.record_id, now=LATER)
    assert export(repo) == before
    undone, _ = repo.record(added.record_id)
    assert (undone.status, undone.undone_by_id) == (RecordStatus.UNDONE, result.record_id)
    record, operations = repo.record(result.record_id)
    assert (record.job, record.undoes_id, record.stats["skipped"]) == ("undo", added.record_id, [])
    assert {op.op for op in operations} == {"delete_memory", "update_memory"}


def test_undo_set_status_restores_export_and_version(repo: Repository) -> None:
    ids = seed(repo, 3)
    before = export(repo)
    record_id = repo.set_status("ns", ids[:2], MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    assert repo.memories("ns", ids[:1])[0].version == 2
    undo(repo, record_id, now=LATER + HOUR)
    assert export(repo) == before


def test_undo_consolidation_restores_timeline_relations_and_export(repo: Repository) -> None:
    ids = seed(repo)
    repo.add_relation("ns", ids[1], ids[4], "causal", strength=0.8, now=NOW, job="linker")
    before, order = export(repo), timeline(repo, "ns")
    record_id = applied(repo, "consolidator", consolidation(ids[1:3]))
    assert timeline(repo, "ns") != order
    undo(repo, record_id, now=LATER + HOUR)
    assert export(repo) == before
    assert timeline(repo, "ns") == order


def test_undo_purge_recreates_row_links_and_relations(repo: Repository) -> None:
    ids = seed(repo, 4)
    repo.add_relation("ns", ids[1], ids[3], "causal", strength=0.7, now=NOW, job="linker")
    applied(repo, "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)])
    # Another memory names the tombstone as its replacement: the purge clears that link.
    applied(
        repo,
        "auditor",
        [SetStatus(memory_id=ids[2], status=MemoryStatus.SUPERSEDED, replaced_by=ids[1])],
    )
    before = export(repo)
    record_id = applied(repo, "retention", [Purge(memory_id=ids[1])])
    assert repo.get_memory("ns", ids[1]) is None
    undo(repo, record_id, now=LATER + HOUR)
    assert export(repo) == before


def test_undo_every_record_in_reverse_restores_empty_export(repo: Repository) -> None:
    ids = seed(repo)
    applied(repo, "consolidator", consolidation(ids[:2]))
    applied(repo, "auditor", [UpdateMemory(memory_id=ids[3], changes={"content": "edited"})])
    for record in find_records(repo):  # newest first
        undo(repo, record.id, now=LATER + HOUR)
    assert export(repo) == []


def test_undo_keeps_recall_statistics_and_ignores_them_in_conflicts(repo: Repository) -> None:
    ids = seed(repo, 2)
    record_id = repo.set_status("ns", ids[:1], MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    repo.reinforce({ids[0]: 3}, now=LATER + HOUR, step=0.1, max_boost=2.0)
    undo(repo, record_id, now=LATER + 2 * HOUR)
    memory = repo.memories("ns", ids[:1])[0]
    assert (memory.status, memory.access_count, memory.version) == ("active", 3, 1)


# -- conflicts ---------------------------------------------------------------------------------


def test_undo_memory_changed_after_record_raises_conflict_and_writes_nothing(
    repo: Repository,
) -> None:
    ids = seed(repo, 2)
    first = repo.set_status("ns", ids, MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert first is not None
    applied(repo, "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "edited"})])
    before, records = export(repo), len(find_records(repo))
    with pytest.raises(UndoConflict) as caught:
        undo(repo, first, now=LATER + HOUR)
    conflict = caught.value.conflicts[0]
    assert (conflict.kind, conflict.target_id) == ("memory", ids[0])
    assert {d.field for d in conflict.fields} >= {"content", "version"}
    assert f"memory {ids[0]}" in str(caught.value)
    assert "'edited'" in str(caught.value)
    assert export(repo) == before
    assert len(find_records(repo)) == records


def test_undo_force_applies_rest_and_records_skipped(repo: Repository) -> None:
    ids = seed(repo, 2)
    first = repo.set_status("ns", ids, MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert first is not None
    applied(repo, "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "edited"})])
    result = undo(repo, first, now=LATER + HOUR, force=True)
    assert [c.target_id for c in result.skipped] == [ids[0]]
    statuses = {m.id: m.status for m in repo.memories("ns", ids)}
    assert statuses == {ids[0]: "archived", ids[1]: "active"}
    record, _ = repo.record(result.record_id)
    assert [s["id"] for s in record.stats["skipped"]] == [ids[0]]
    assert record.stats["skipped"][0]["reason"] == "changed since"


def test_undo_created_memory_with_later_relation_conflicts(repo: Repository) -> None:
    ids = seed(repo, 2)
    added = repo.add_memories("ns", [MemoryIn(content="new", timestamp=NOW + 5 * HOUR)], now=NOW)
    assert added.record_id is not None
    new = added.created[0]
    repo.add_relation("ns", new, ids[0], "causal", strength=0.5, now=LATER, job="linker")
    plan = plan_undo(repo, added.record_id)
    blocked = {c.target_id: c.reason for c in plan.conflicts}
    assert "still refers to it" in blocked[new]
    # Its timeline neighbour stays linked to it, so the timeline stays a chain.
    assert ids[1] in blocked
    with pytest.raises(UndoConflict, match="even forcing"):
        undo(repo, added.record_id, now=LATER, force=True)


def test_plan_undo_lists_steps_in_reverse_and_writes_nothing(repo: Repository) -> None:
    ids = seed(repo, 3)
    record_id = applied(repo, "consolidator", consolidation(ids[:2]))
    before = export(repo)
    plan = plan_undo(repo, record_id)
    assert [s.seq for s in plan.steps] == sorted((s.seq for s in plan.steps), reverse=True)
    assert not plan.conflicts
    assert {s.action for s in plan.steps} == {"delete", "restore"}
    assert export(repo) == before


# -- undo of undo, and refusals ------------------------------------------------------------------


def test_undo_of_undo_restores_state_after_original(repo: Repository) -> None:
    ids = seed(repo)
    record_id = applied(repo, "consolidator", consolidation(ids[1:3]))
    after_original = export(repo)
    first = undo(repo, record_id, now=LATER + HOUR)
    second = undo(repo, first.record_id, now=LATER + 2 * HOUR)
    assert export(repo) == after_original
    original, _ = repo.record(record_id)
    undo_record, _ = repo.record(first.record_id)
    assert (original.status, original.undone_by_id) == ("applied", None)
    assert (undo_record.status, undo_record.undone_by_id) == ("undone", second.record_id)
    # The original is in force again, so it can be undone again.
    undo(repo, record_id, now=LATER + 3 * HOUR)
    assert timeline(repo, "ns") == list(ids)


def test_undo_same_record_twice_raises_already_undone(repo: Repository) -> None:
    ids = seed(repo, 2)
    record_id = repo.set_status("ns", ids, MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    result = undo(repo, record_id, now=LATER)
    with pytest.raises(AlreadyUndone, match=f"already undone by record {result.record_id}"):
        undo(repo, record_id, now=LATER)
    with pytest.raises(AlreadyUndone):
        plan_undo(repo, record_id)


def test_undo_unknown_record_raises_not_found(repo: Repository) -> None:
    with pytest.raises(NotFound, match="record 999 does not exist"):
        undo(repo, 999, now=NOW)


def test_undo_record_without_operations_raises_nothing_to_undo(repo: Repository) -> None:
    record_id = repo.write_bare_record("ns", "consolidator", now=NOW, status="refused")
    with pytest.raises(NothingToUndo, match="refused"):
        undo(repo, record_id, now=NOW)


# -- the vector index --------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path), create=True)
    yield opened
    opened.close()


def assert_index_matches(store: Store) -> None:
    store.indexer.sync()
    assert store.indexer.verify("ns").clean
    assert store.index.versions("ns") == store.repository.index_state("ns")


def test_undo_consolidation_and_ingest_vector_index_follows(store: Store) -> None:
    repo = store.repository
    ids = seed(repo)
    assert_index_matches(store)
    consolidated = applied(repo, "consolidator", consolidation(ids[1:3]))
    edited = applied(repo, "auditor", [UpdateMemory(memory_id=ids[4], changes={"content": "x"})])
    assert_index_matches(store)
    undo(repo, edited, now=LATER + HOUR)
    assert_index_matches(store)
    assert store.index.versions("ns")[ids[4]] == 1
    undo(repo, consolidated, now=LATER + HOUR)
    assert_index_matches(store)
    assert set(store.index.versions("ns")) == set(ids)
    for record in find_records(repo, job="ingest"):
        undo(repo, record.id, now=LATER + HOUR)
    assert_index_matches(store)
    assert store.index.versions("ns") == {}


# -- the records API ---------------------------------------------------------------------------

KEY_A = "key-a-0123456789"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    keys = (ApiKey(key=KEY_A, namespaces=("a",)),)
    opened = Store.open(Settings(data_dir=tmp_path, api=ApiSettings(keys=keys)), create=True)
    app = create_app(opened, start_workers=False)
    app.include_router(router)
    with TestClient(app) as test_client:
        yield test_client, opened
    opened.close()


def test_records_api_lists_and_shows_own_namespace_only(
    client: tuple[TestClient, Store],
) -> None:
    http, opened = client
    seed(opened.repository, 2, namespace="a")
    seed(opened.repository, 2, namespace="b")
    headers = {"Authorization": f"Bearer {KEY_A}"}
    listed = http.get("/v1/records", headers=headers).json()["records"]
    assert [r["namespace"] for r in listed] == ["a"]
    assert {"id", "job", "namespace", "status", "started_at", "finished_at"} <= set(listed[0])
    assert http.get("/v1/records?namespace=b", headers=headers).json() == {"records": []}
    shown = http.get(f"/v1/records/{listed[0]['id']}", headers=headers).json()
    assert [op["seq"] for op in shown["operations"]] == [0, 1]
    assert shown["operations"][0]["after"]["content"] == "fragment 0"
    other = find_records(opened.repository, namespaces=["b"])[0].id
    missing = http.get(f"/v1/records/{other}", headers=headers)
    assert missing.status_code == 404
    absent = http.get("/v1/records/99999", headers=headers)
    assert absent.status_code == 404
    assert missing.json()["error"]["message"] == f"record {other} does not exist"
    assert http.get("/v1/records").status_code == 401


def test_records_api_filters_by_job_and_status(client: tuple[TestClient, Store]) -> None:
    http, opened = client
    ids = seed(opened.repository, 2, namespace="a")
    record_id = opened.repository.set_status("a", ids, MemoryStatus.ARCHIVED, now=LATER, job="x")
    assert record_id is not None
    undo(opened.repository, record_id, now=LATER)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    undone = http.get("/v1/records?status=undone", headers=headers).json()["records"]
    assert [r["id"] for r in undone] == [record_id]
    jobs = http.get("/v1/records?job=undo&limit=1", headers=headers).json()["records"]
    assert [r["undoes_id"] for r in jobs] == [record_id]
