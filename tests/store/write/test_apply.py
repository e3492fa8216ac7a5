"""Plan operations applied through the writer: one record, exact images, timeline kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store.database import Database
from store.errors import NotFound, ValidationFailed
from store.kinds import MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.schemas import MemoryIn
from store.write.record_info import RecordInfo
from tests.helpers.timeline import timeline

NOW = datetime(2026, 2, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def seed(db: Database, count: int = 5) -> tuple[int, ...]:
    items = [
        MemoryIn(content=f"fragment {i}", timestamp=NOW + i * HOUR, session_id="s")
        for i in range(count)
    ]
    return db.writer.add_memories("ns", items, now=NOW).ids


def test_apply_consolidation_summary_takes_fragments_place(db: Database) -> None:
    ids = seed(db)
    relation = CreateRelation(source=ids[1], target=ids[4], type="causal", strength=0.8)
    db.writer.apply("ns", "test", [relation], now=NOW)
    fragments = ids[1:3]
    ops = [
        CreateMemory(
            key="summary",
            content="fragments 1 and 2, summarised",
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
    applied = db.writer.apply(
        "ns",
        "consolidator",
        ops,
        now=NOW,
        info=RecordInfo(model="m", tokens_in=10),
        job_state={"watermark": 5},
    )
    summary = applied.created["summary"]
    order = timeline(db, "ns")
    assert order == [ids[0], summary, ids[3], ids[4]]
    assert summary not in db.memories.active("ns", fragments)
    edges = {(e.source_id, e.target_id, e.type) for e in db.search.edges("ns", [summary])}
    assert (summary, ids[4], "causal") in edges
    assert {(summary, f, "derived_from") for f in fragments} <= edges
    record, operations = db.records.get(applied.record_id)  # type: ignore[arg-type]
    assert record.model == "m"
    assert record.tokens_in == 10
    assert all(op.before is not None or op.op.startswith("create") for op in operations)
    assert db.work.job_state("consolidator", "ns") == {"watermark": 5}


def test_apply_unknown_or_foreign_id_raises_and_writes_nothing(db: Database) -> None:
    ids = seed(db, 2)
    other = db.writer.add_memories("other", [MemoryIn(content="x")], now=NOW).ids[0]
    before = list(db.memories.export("ns"))
    for bad in (other, 9999):
        with pytest.raises(NotFound):
            db.writer.apply(
                "ns",
                "auditor",
                [
                    SetStatus(memory_id=ids[0], status=MemoryStatus.ARCHIVED),
                    SetStatus(memory_id=bad, status=MemoryStatus.ARCHIVED),
                ],
                now=NOW,
            )
    assert list(db.memories.export("ns")) == before


def test_apply_update_refuses_fields_outside_whitelist(db: Database) -> None:
    ids = seed(db, 1)
    with pytest.raises(ValidationFailed):
        db.writer.apply(
            "ns",
            "auditor",
            [UpdateMemory(memory_id=ids[0], changes={"namespace": "x"})],
            now=NOW,
        )


def test_apply_purge_only_tombstones_and_relinks_timeline(db: Database) -> None:
    ids = seed(db, 3)
    with pytest.raises(ValidationFailed):
        db.writer.apply("ns", "retention", [Purge(memory_id=ids[1])], now=NOW)
    archived = db.writer.apply(
        "ns", "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)], now=NOW
    )
    applied = db.writer.apply("ns", "retention", [Purge(memory_id=ids[1])], now=NOW)
    assert timeline(db, "ns") == [ids[0], ids[2]]
    assert db.memories.get("ns", ids[1]) is None
    _, operations = db.records.get(applied.record_id)  # type: ignore[arg-type]
    purge = [op for op in operations if op.op == "delete_memory"]
    assert len(purge) == 1
    # The purge keeps that the row existed (id, hash), not its content ...
    assert purge[0].before is not None
    assert purge[0].before["forgotten"] is True
    assert "content" not in purge[0].before
    # ... and the record that archived it no longer holds its images either.
    _, earlier = db.records.get(archived.record_id)  # type: ignore[arg-type]
    images = [op.before for op in earlier if op.target_id == ids[1]]
    images += [op.after for op in earlier if op.target_id == ids[1]]
    assert images
    assert all(i is None or "content" not in i for i in images)


def test_apply_purge_drops_the_images_of_its_relations_and_only_theirs(db: Database) -> None:
    ids = seed(db, 3)
    linked = db.writer.apply(
        "ns",
        "linker",
        [
            CreateRelation(source=ids[1], target=ids[0], type="causal", strength=0.2),
            CreateRelation(source=ids[0], target=ids[2], type="causal", strength=0.2),
        ],
        now=NOW,
    )
    _, before = db.records.get(linked.record_id)  # type: ignore[arg-type]
    db.writer.apply(
        "ns", "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)], now=NOW
    )
    db.writer.apply("ns", "retention", [Purge(memory_id=ids[1])], now=NOW)
    _, after = db.records.get(linked.record_id)  # type: ignore[arg-type]
    # The relation to the purged memory is left a tombstone; the other keeps its image (it
    # names other memories, though the digits of the purged one's id appear in it).
    touching, other = after
    assert touching.after is not None
    assert touching.after["forgotten"] is True
    assert other.after == before[1].after
    assert other.after is not None
    assert (other.after["source_id"], other.after["target_id"]) == (ids[0], ids[2])


def test_apply_nothing_to_do_leaves_no_record(db: Database) -> None:
    ids = seed(db, 1)
    applied = db.writer.apply(
        "ns",
        "auditor",
        [UpdateMemory(memory_id=ids[0], changes={"content": "fragment 0"})],
        now=NOW,
    )
    assert applied.record_id is None


def test_merging_a_copy_adds_no_second_link_running_the_other_way(db: Database) -> None:
    keeper, other, copy = seed(db, 3)
    links = [
        CreateRelation(source=keeper, target=other, type="associative", strength=0.7),
        CreateRelation(source=other, target=copy, type="associative", strength=0.7),
        CreateRelation(source=keeper, target=other, type="causal", strength=0.7),
        CreateRelation(source=other, target=copy, type="causal", strength=0.7),
    ]
    db.writer.apply("ns", "linker", links, now=NOW)
    merge = [
        InheritRelations(from_ids=(copy,), to=keeper),
        SetStatus(memory_id=copy, status=MemoryStatus.MERGED, replaced_by=keeper),
    ]
    applied = db.writer.apply("ns", "auditor", merge, now=NOW)
    edges = {(e.source_id, e.target_id, e.type) for e in db.search.edges("ns", [keeper])}
    # other -> keeper would say again what keeper -> other says; a cause has a direction.
    assert (other, keeper, "associative") not in edges
    assert (other, keeper, "causal") in edges
    _, operations = db.records.get(applied.record_id)  # type: ignore[arg-type]
    assert [op.op for op in operations].count("create_relation") == 1
