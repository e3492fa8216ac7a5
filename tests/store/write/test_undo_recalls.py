"""Undo of a record that carried recalls (an exact duplicate merged into its keeper)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store.database import Database
from store.db import session_factory
from store.images import memory_image
from store.kinds import MemoryStatus
from store.models import Memory
from store.operations import CarryRecalls, InheritRelations, SetStatus
from store.schemas import MemoryIn
from store.write.undo import undo

NOW = datetime(2026, 2, 1, tzinfo=UTC)
LATER = NOW + timedelta(days=3)
DAY = timedelta(days=1)


def twins(db: Database) -> tuple[int, int]:
    items = [
        MemoryIn(content="Maya is allergic to peanuts.", type="fact", session_id=s)
        for s in ("a", "b")
    ]
    keeper, copy = db.writer.add_memories("ns", items, now=NOW).ids
    db.writer.reinforce({keeper: 1}, now=NOW + DAY, step=0.1, max_boost=2.0)
    db.writer.reinforce({copy: 4}, now=NOW + 2 * DAY, step=0.1, max_boost=2.0)
    return keeper, copy


def merge(db: Database, keeper: int, copy: int) -> int:
    applied = db.writer.apply(
        "ns",
        "auditor",
        [
            InheritRelations(from_ids=(copy,), to=keeper),
            CarryRecalls(from_id=copy, to=keeper),
            SetStatus(memory_id=copy, status=MemoryStatus.MERGED, replaced_by=keeper),
        ],
        now=LATER,
    )
    assert applied.record_id is not None
    return applied.record_id


def images(db: Database, *ids: int) -> list[dict[str, object]]:
    """The memories' rows as images, their place on the timeline aside."""
    with session_factory(db.writer.engine)() as session:
        rows = [session.get(Memory, i) for i in ids]
        return [
            {k: v for k, v in memory_image(row).items() if k not in ("prev_id", "next_id")}
            for row in rows
            if row is not None
        ]


def test_carry_recalls_adds_count_latest_recall_and_greater_boost(db: Database) -> None:
    keeper, copy = twins(db)

    merge(db, keeper, copy)

    kept, merged = db.memories.get("ns", keeper), db.memories.get("ns", copy)
    assert kept is not None
    assert merged is not None
    assert (kept.access_count, kept.last_accessed) == (5, NOW + 2 * DAY)
    assert kept.base_importance == merged.base_importance  # the greater boost (4 recalls)
    assert (merged.access_count, merged.status) == (4, "merged")  # the copy keeps its own
    assert kept.version == 1  # recall statistics are not content: nothing to re-embed


def test_undo_of_a_carry_restores_both_memories_exactly(db: Database) -> None:
    keeper, copy = twins(db)
    before = images(db, keeper, copy)
    record_id = merge(db, keeper, copy)

    undo(db.writer, record_id, now=LATER + DAY)

    assert images(db, keeper, copy) == before


def test_undo_of_a_carry_keeps_recalls_made_since(db: Database) -> None:
    keeper, copy = twins(db)
    record_id = merge(db, keeper, copy)
    db.writer.reinforce({keeper: 2}, now=LATER + DAY, step=0.1, max_boost=2.0)

    undo(db.writer, record_id, now=LATER + 2 * DAY)

    kept = db.memories.get("ns", keeper)
    assert kept is not None
    assert (kept.access_count, kept.last_accessed) == (1 + 2, LATER + DAY)
    assert kept.base_importance == pytest.approx(5.1 + 2 * 0.1)  # the carried boost taken back


def test_undo_of_the_undo_carries_the_recalls_again(db: Database) -> None:
    keeper, copy = twins(db)
    record_id = merge(db, keeper, copy)
    after = images(db, keeper, copy)
    undone = undo(db.writer, record_id, now=LATER + DAY)

    undo(db.writer, undone.record_id, now=LATER + 2 * DAY)

    assert [i["access_count"] for i in images(db, keeper, copy)] == [
        i["access_count"] for i in after
    ]
    assert images(db, keeper, copy)[0]["base_importance"] == after[0]["base_importance"]
