"""Undo of maintenance records: exact round trips, conflicts, undo of undo, the index, the API."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from secretary.config import Settings
from store.api.app import create_app
from store.database import Database
from store.db import session_factory
from store.errors import NotFound
from store.kinds import MemoryStatus, Outcome, RecordStatus
from store.models import MemoryRelation
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.schemas import MemoryIn
from store.service import Store
from store.settings import ApiKey, ApiSettings
from store.write import edits
from store.write.forget import ForgetSelection
from store.write.record_info import RecordInfo
from store.write.undo import (
    AlreadyUndone,
    NothingToUndo,
    UndoConflict,
    plan_undo,
    undo,
)
from tests.helpers.timeline import timeline

NOW = datetime(2026, 2, 1, tzinfo=UTC)
LATER = NOW + timedelta(days=3)
HOUR = timedelta(hours=1)


def export(db: Database, namespace: str = "ns") -> list[str]:
    return list(db.memories.export(namespace))


def seed(db: Database, count: int = 5, *, namespace: str = "ns") -> tuple[int, ...]:
    items = [
        MemoryIn(content=f"fragment {i}", timestamp=NOW + i * HOUR, session_id="s")
        for i in range(count)
    ]
    return db.writer.add_memories(namespace, items, now=NOW).ids


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


def applied(db: Database, job: str, ops: list[Operation]) -> int:
    record_id = db.writer.apply("ns", job, ops, now=LATER).record_id
    assert record_id is not None
    return record_id


def set_status(
    db: Database,
    ids: Sequence[int],
    status: MemoryStatus,
    *,
    now: datetime,
    job: str,
    namespace: str = "ns",
) -> int | None:
    """Change the memories' status in one record; return the record id."""
    ops = [SetStatus(memory_id=i, status=status) for i in ids]
    return db.writer.apply(namespace, job, ops, now=now).record_id


def relate(
    db: Database, source: int, target: int, type_: str, *, strength: float, now: datetime, job: str
) -> int:
    """Relate two memories of namespace "ns" in a record of their own; return the record id."""
    op = CreateRelation(source=source, target=target, type=type_, strength=strength)
    record_id = db.writer.apply("ns", job, [op], now=now).record_id
    assert record_id is not None
    return record_id


# -- round trips -------------------------------------------------------------------------------


def test_undo_ingest_into_timeline_restores_export(db: Database) -> None:
    seed(db, 3)
    before = export(db)
    items = [
        MemoryIn(content="between", timestamp=NOW + HOUR / 2, external_id="e1"),
        MemoryIn(content="last", timestamp=NOW + 9 * HOUR),
    ]
    added = db.writer.add_memories("ns", items, now=LATER)
    assert added.record_id is not None
    result = undo(db.writer, added.record_id, now=LATER)
    assert export(db) == before
    undone, _ = db.records.get(added.record_id)
    assert (undone.status, undone.undone_by_id) == (RecordStatus.UNDONE, result.record_id)
    record, operations = db.records.get(result.record_id)
    assert (record.job, record.undoes_id, record.stats["skipped"]) == ("undo", added.record_id, [])
    assert {op.op for op in operations} == {"delete_memory", "update_memory"}


def test_undo_set_status_restores_export_and_version(db: Database) -> None:
    ids = seed(db, 3)
    before = export(db)
    record_id = set_status(db, ids[:2], MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    assert db.memories.many("ns", ids[:1])[0].version == 2
    undo(db.writer, record_id, now=LATER + HOUR)
    assert export(db) == before


def test_undo_consolidation_restores_timeline_relations_and_export(db: Database) -> None:
    ids = seed(db)
    relate(db, ids[1], ids[4], "causal", strength=0.8, now=NOW, job="linker")
    before, order = export(db), timeline(db, "ns")
    record_id = applied(db, "consolidator", consolidation(ids[1:3]))
    assert timeline(db, "ns") != order
    undo(db.writer, record_id, now=LATER + HOUR)
    assert export(db) == before
    assert timeline(db, "ns") == order


def test_undo_purge_is_refused_the_content_is_gone(db: Database) -> None:
    ids = seed(db, 4)
    relate(db, ids[1], ids[3], "causal", strength=0.7, now=NOW, job="linker")
    applied(db, "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)])
    # Another memory names the tombstone as its replacement: the purge clears that link.
    applied(
        db,
        "auditor",
        [SetStatus(memory_id=ids[2], status=MemoryStatus.SUPERSEDED, replaced_by=ids[1])],
    )
    record_id = applied(db, "retention", [Purge(memory_id=ids[1])])
    assert db.memories.get("ns", ids[1]) is None
    after, records = export(db), len(db.records.find())
    # Retention keeps no image of what it purges, so there is nothing to bring back.
    with pytest.raises(UndoConflict, match=f"memory {ids[1]}: erased since") as caught:
        undo(db.writer, record_id, now=LATER + HOUR)
    # Forcing would skip every part: the message does not offer it.
    assert "Even forcing (--force) has nothing to apply" in str(caught.value)
    assert "applies only the parts" not in str(caught.value)
    assert export(db) == after
    assert len(db.records.find()) == records


def test_undo_of_a_record_whose_memory_retention_purged_names_the_purge_and_when(
    db: Database,
) -> None:
    ids = seed(db, 3)
    edited = applied(db, "auditor", [UpdateMemory(memory_id=ids[1], changes={"content": "x"})])
    archived = applied(db, "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)])
    purge_at = LATER + timedelta(days=31)
    purged = db.writer.apply("ns", "retention", [Purge(memory_id=ids[1])], now=purge_at).record_id
    assert purged is not None
    for record_id in (edited, archived):
        with pytest.raises(UndoConflict) as caught:
            undo(db.writer, record_id, now=purge_at + HOUR, cascade=True)
        (dependent,) = caught.value.dependents
        assert (dependent.record_id, dependent.job, dependent.final) == (purged, "retention", True)
        assert dependent.at == purge_at
        assert dependent.what == (f"erased memory {ids[1]}",)
        message = str(caught.value)
        assert f"memory {ids[1]}: erased since" in message
        assert f"#{purged} retention ({purge_at:%Y-%m-%d %H:%M:%S}, which cannot be undone)" in (
            message
        )
        assert "erasure cannot be undone" in message
        assert "--cascade cannot" not in message


def test_ids_are_never_reused_after_undo(db: Database) -> None:
    ids = seed(db, 2)
    made = applied(
        db,
        "extractor",
        [
            CreateMemory(key="m", content="a new fact", type="fact", event_time=NOW),
            CreateRelation(source="m", target=ids[0], type="causal", strength=0.5),
        ],
    )
    _, operations = db.records.get(made)
    memory_id = next(op.target_id for op in operations if op.target_kind == "memory")
    relation_id = next(op.target_id for op in operations if op.target_kind == "relation")
    undone = undo(db.writer, made, now=LATER + HOUR).record_id
    assert db.memories.get("ns", memory_id) is None

    # What comes next gets ids of its own (ids are store-wide: another namespace keeps the
    # timeline here untouched), so a cached id never names other content ...
    items = [MemoryIn(content=f"something else {i}", timestamp=NOW) for i in range(2)]
    fresh = db.writer.add_memories("other", items, now=LATER + 2 * HOUR).ids
    assert min(fresh) > memory_id
    link = CreateRelation(source=fresh[0], target=fresh[1], type="causal", strength=0.5)
    db.writer.apply("other", "linker", [link], now=LATER + 2 * HOUR)
    with session_factory(db.engine)() as session:
        newest = session.scalar(select(func.max(MemoryRelation.id)))
    assert newest is not None
    assert newest > relation_id
    # ... and undoing the undo brings the first memory back under its own id, no false conflict.
    undo(db.writer, undone, now=LATER + 3 * HOUR)
    restored = db.memories.get("ns", memory_id)
    assert restored is not None
    assert restored.content == "a new fact"


def test_undo_every_record_in_reverse_restores_empty_export(db: Database) -> None:
    ids = seed(db)
    applied(db, "consolidator", consolidation(ids[:2]))
    applied(db, "auditor", [UpdateMemory(memory_id=ids[3], changes={"content": "edited"})])
    for record in db.records.find():  # newest first
        undo(db.writer, record.id, now=LATER + HOUR)
    assert export(db) == []


def test_undo_keeps_recall_statistics_and_ignores_them_in_conflicts(db: Database) -> None:
    ids = seed(db, 2)
    record_id = set_status(db, ids[:1], MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    db.writer.reinforce({ids[0]: 3}, now=LATER + HOUR, step=0.1, max_boost=2.0)
    undo(db.writer, record_id, now=LATER + 2 * HOUR)
    memory = db.memories.many("ns", ids[:1])[0]
    assert (memory.status, memory.access_count, memory.version) == ("active", 3, 1)


# -- conflicts ---------------------------------------------------------------------------------


def test_undo_keeps_a_later_change_to_other_fields_and_restores_its_own(db: Database) -> None:
    ids = seed(db, 2)
    first = set_status(db, ids, MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert first is not None
    applied(db, "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "edited"})])
    undo(db.writer, first, now=LATER + HOUR)
    rows = {m.id: m for m in db.memories.many("ns", ids)}
    assert {m.status for m in rows.values()} == {"active"}
    assert rows[ids[0]].content == "edited"  # the later change stays
    assert rows[ids[0]].version == 4  # archived, edited, restored: each change counts
    assert timeline(db, "ns") == list(ids)


def test_undo_memory_changed_in_the_same_field_raises_conflict_and_writes_nothing(
    db: Database,
) -> None:
    ids = seed(db, 2)
    first = applied(db, "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "one"})])
    second = applied(db, "soul_mapper", [UpdateMemory(memory_id=ids[0], changes={"content": "x"})])
    before, records = export(db), len(db.records.find())
    with pytest.raises(UndoConflict) as caught:
        undo(db.writer, first, now=LATER + HOUR)
    (conflict,) = caught.value.conflicts
    assert (conflict.kind, conflict.target_id, conflict.reason) == (
        "memory",
        ids[0],
        "changed since",
    )
    assert [d.field for d in conflict.fields] == ["content"]  # derived fields are not compared
    (dependent,) = caught.value.dependents
    assert (dependent.record_id, dependent.job) == (second, "soul_mapper")
    assert dependent.what == (f"changed content of memory {ids[0]}",)
    message = str(caught.value)
    assert f"#{second} soul_mapper" in message
    assert "'x'" in message
    assert "--cascade" in message
    assert export(db) == before
    assert len(db.records.find()) == records


def test_undo_force_applies_rest_and_records_skipped(db: Database) -> None:
    ids = seed(db, 4)
    first = set_status(db, [ids[0], ids[3]], MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert first is not None
    set_status(db, [ids[0]], MemoryStatus.SUPERSEDED, now=LATER, job="auditor")
    with pytest.raises(UndoConflict, match=r"Forcing it \(--force\) applies only the parts"):
        undo(db.writer, first, now=LATER + HOUR)  # memory 3's part would apply: offered
    result = undo(db.writer, first, now=LATER + HOUR, force=True)
    # Memory 0's status changed since: it is skipped; the rest of the record is undone.
    assert [c.target_id for c in result.skipped] == [ids[0]]
    statuses = {m.id: m.status for m in db.memories.many("ns", ids)}
    assert statuses == {ids[0]: "superseded", ids[1]: "active", ids[2]: "active", ids[3]: "active"}
    assert timeline(db, "ns") == [ids[1], ids[2], ids[3]]
    record, _ = db.records.get(result.record_id)
    assert {s["id"]: s["reason"] for s in record.stats["skipped"]} == {ids[0]: "changed since"}


def test_undo_created_memory_with_later_relation_conflicts_naming_the_linker(db: Database) -> None:
    ids = seed(db, 2)
    start = export(db)
    added = db.writer.add_memories(
        "ns", [MemoryIn(content="new", timestamp=NOW + 5 * HOUR)], now=NOW
    )
    assert added.record_id is not None
    new = added.created[0]
    linker = relate(db, new, ids[0], "causal", strength=0.5, now=LATER, job="linker")
    plan = plan_undo(db.writer, added.record_id)
    # Only the relation blocks it: its timeline neighbour is no dependency.
    (conflict,) = plan.conflicts
    assert conflict.target_id == new
    assert "still links from it" in conflict.reason  # the new memory is its source
    assert [d.record_id for d in plan.dependents] == [linker]
    with pytest.raises(UndoConflict, match="Even forcing"):
        undo(db.writer, added.record_id, now=LATER, force=True)
    result = undo(db.writer, added.record_id, now=LATER, cascade=True)
    assert result.cascaded == (linker,)
    assert export(db) == start
    statuses = {r.id: r.status for r in db.records.find() if r.id in (added.record_id, linker)}
    assert set(statuses.values()) == {"undone"}
    undo(db.writer, result.record_id, now=LATER + HOUR)  # both back in force, both rows back
    statuses = {r.id: r.status for r in db.records.find() if r.id in (added.record_id, linker)}
    assert set(statuses.values()) == {"applied"}
    with session_factory(db.engine)() as session:
        assert session.scalar(select(func.count()).select_from(MemoryRelation)) == 1


def test_plan_undo_lists_steps_in_reverse_and_writes_nothing(db: Database) -> None:
    ids = seed(db, 3)
    record_id = applied(db, "consolidator", consolidation(ids[:2]))
    before = export(db)
    plan = plan_undo(db.writer, record_id)
    assert [s.seq for s in plan.steps] == sorted((s.seq for s in plan.steps), reverse=True)
    assert not plan.conflicts
    assert {s.action for s in plan.steps} == {"delete", "restore"}
    assert export(db) == before


# -- undo of undo, and refusals ------------------------------------------------------------------


def test_undo_of_undo_restores_state_after_original(db: Database) -> None:
    ids = seed(db)
    record_id = applied(db, "consolidator", consolidation(ids[1:3]))
    after_original = export(db)
    first = undo(db.writer, record_id, now=LATER + HOUR)
    second = undo(db.writer, first.record_id, now=LATER + 2 * HOUR)
    assert export(db) == after_original
    original, _ = db.records.get(record_id)
    undo_record, _ = db.records.get(first.record_id)
    assert (original.status, original.undone_by_id) == ("applied", None)
    assert (undo_record.status, undo_record.undone_by_id) == ("undone", second.record_id)
    # The original is in force again, so it can be undone again.
    undo(db.writer, record_id, now=LATER + 3 * HOUR)
    assert timeline(db, "ns") == list(ids)


def test_undo_same_record_twice_raises_already_undone(db: Database) -> None:
    ids = seed(db, 2)
    record_id = set_status(db, ids, MemoryStatus.ARCHIVED, now=LATER, job="auditor")
    assert record_id is not None
    result = undo(db.writer, record_id, now=LATER)
    with pytest.raises(AlreadyUndone, match=f"already undone by record {result.record_id}"):
        undo(db.writer, record_id, now=LATER)
    with pytest.raises(AlreadyUndone):
        plan_undo(db.writer, record_id)


def test_undo_unknown_record_raises_not_found(db: Database) -> None:
    with pytest.raises(NotFound, match="record 999 does not exist"):
        undo(db.writer, 999, now=NOW)


def test_undo_record_without_operations_raises_nothing_to_undo(db: Database) -> None:
    record_id = db.writer.apply(
        "ns", "consolidator", (), now=NOW, info=RecordInfo(outcome=Outcome.REFUSED)
    ).record_id
    assert record_id is not None
    with pytest.raises(NothingToUndo, match="refused"):
        undo(db.writer, record_id, now=NOW)


# -- the vector index --------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path), create=True)
    yield opened
    opened.close()


def assert_index_matches(store: Store) -> None:
    store.indexer.sync()
    assert store.indexer.verify("ns").clean
    assert store.index.versions("ns") == store.db.memories.index_state("ns")


def test_undo_consolidation_and_ingest_vector_index_follows(store: Store) -> None:
    db = store.db
    ids = seed(db)
    assert_index_matches(store)
    consolidated = applied(db, "consolidator", consolidation(ids[1:3]))
    edited = applied(db, "auditor", [UpdateMemory(memory_id=ids[4], changes={"content": "x"})])
    assert_index_matches(store)
    undo(db.writer, edited, now=LATER + HOUR)
    assert_index_matches(store)
    assert store.index.versions("ns")[ids[4]] == 1
    undo(db.writer, consolidated, now=LATER + HOUR)
    assert_index_matches(store)
    assert set(store.index.versions("ns")) == set(ids)
    for record in db.records.find(job="ingest"):
        undo(db.writer, record.id, now=LATER + HOUR)
    assert_index_matches(store)
    assert store.index.versions("ns") == {}


# -- the records API ---------------------------------------------------------------------------

KEY_A = "key-a-0123456789"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    keys = (ApiKey(key=KEY_A, namespaces=("a",)),)
    opened = Store.open(Settings(data_dir=tmp_path, api=ApiSettings(keys=keys)), create=True)
    app = create_app(opened, start_workers=False)
    with TestClient(app) as test_client:
        yield test_client, opened
    opened.close()


def test_records_api_lists_and_shows_own_namespace_only(
    client: tuple[TestClient, Store],
) -> None:
    http, opened = client
    seed(opened.db, 2, namespace="a")
    seed(opened.db, 2, namespace="b")
    headers = {"Authorization": f"Bearer {KEY_A}"}
    listed = http.get("/v1/records", headers=headers).json()["records"]
    assert [r["namespace"] for r in listed] == ["a"]
    assert {"id", "job", "namespace", "status", "started_at", "finished_at"} <= set(listed[0])
    assert http.get("/v1/records?namespace=b", headers=headers).json() == {"records": []}
    shown = http.get(f"/v1/records/{listed[0]['id']}", headers=headers).json()
    assert [op["seq"] for op in shown["operations"]] == [0, 1]
    assert shown["operations"][0]["after"]["content"] == "fragment 0"
    other = opened.db.records.find(namespaces=["b"])[0].id
    missing = http.get(f"/v1/records/{other}", headers=headers)
    assert missing.status_code == 404
    absent = http.get("/v1/records/99999", headers=headers)
    assert absent.status_code == 404
    assert missing.json()["error"]["message"] == f"record {other} does not exist"
    assert http.get("/v1/records").status_code == 401


def test_records_api_filters_by_job_and_status(client: tuple[TestClient, Store]) -> None:
    http, opened = client
    ids = seed(opened.db, 2, namespace="a")
    record_id = set_status(opened.db, ids, MemoryStatus.ARCHIVED, now=LATER, job="x", namespace="a")
    assert record_id is not None
    undo(opened.db.writer, record_id, now=LATER)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    undone = http.get("/v1/records?status=undone", headers=headers).json()["records"]
    assert [r["id"] for r in undone] == [record_id]
    jobs = http.get("/v1/records?job=undo&limit=1", headers=headers).json()["records"]
    assert [r["undoes_id"] for r in jobs] == [record_id]


def test_undo_of_an_edit_after_its_neighbour_was_deleted_applies(db: Database) -> None:
    """A timeline relink is no change to the memory: undoing an edit of #2 after its neighbour
    #3 was deleted restores #2's text and keeps the timeline as it became (issue 25)."""
    ids = seed(db, 4)
    edited = edits.edit(db.writer, "ns", ids[1], {"content": "fragment 1, corrected"}, now=LATER)
    edits.delete(db.writer, "ns", ids[2], now=LATER + HOUR)
    after_delete = timeline(db, "ns")

    done = undo(db.writer, edited.record_id, now=LATER + 2 * HOUR)

    assert done.skipped == ()
    memory = db.memories.get("ns", ids[1])
    assert memory is not None
    assert memory.content == "fragment 1"
    assert timeline(db, "ns") == after_delete == [ids[0], ids[1], ids[3]]


def test_undo_of_an_edit_still_conflicts_when_a_person_changed_the_text_since(
    db: Database,
) -> None:
    ids = seed(db, 3)
    edited = edits.edit(db.writer, "ns", ids[1], {"content": "first correction"}, now=LATER)
    edits.delete(db.writer, "ns", ids[2], now=LATER + HOUR)
    edits.edit(db.writer, "ns", ids[1], {"content": "second correction"}, now=LATER + HOUR)

    with pytest.raises(UndoConflict) as refused:
        undo(db.writer, edited.record_id, now=LATER + 2 * HOUR)

    (conflict,) = refused.value.conflicts
    assert [d.field for d in conflict.fields if d.field in ("content", "next_id")] == ["content"]


def test_undo_of_a_record_whose_memory_was_forgotten_names_the_forget(db: Database) -> None:
    ids = seed(db, 3)
    edited = applied(db, "auditor", [UpdateMemory(memory_id=ids[1], changes={"content": "x"})])
    forgot = edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[1],)), now=LATER + HOUR)
    with pytest.raises(UndoConflict) as caught:
        undo(db.writer, edited, now=LATER + 2 * HOUR, cascade=True)
    (dependent,) = caught.value.dependents
    assert (dependent.record_id, dependent.job, dependent.final) == (
        forgot.record_id,
        "forget",
        True,
    )
    assert dependent.what == (f"erased memory {ids[1]}",)
    assert "erasure cannot be undone" in str(caught.value)
    # The record changed only the erased memory: forcing would skip all of it, so not offered.
    assert "Even forcing (--force) has nothing to apply" in str(caught.value)
    assert "Adding --force skips those parts" not in str(caught.value)


def test_cascade_with_force_undoes_the_dependents_and_skips_what_an_erasure_made_final(
    db: Database,
) -> None:
    ids = seed(db, 3)
    first = applied(
        db,
        "auditor",
        [UpdateMemory(memory_id=i, changes={"content": f"first {i}"}) for i in ids[:2]],
    )
    second = applied(db, "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "2nd"})])
    edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[1],)), now=LATER + HOUR)
    result = undo(db.writer, first, now=LATER + 2 * HOUR, cascade=True, force=True)
    assert result.cascaded == (second,)
    assert [(c.target_id, c.reason) for c in result.skipped] == [(ids[1], "erased since")]
    assert db.memories.get("ns", ids[0]).content == "fragment 0"  # type: ignore[union-attr]
    assert db.memories.get("ns", ids[1]) is None
