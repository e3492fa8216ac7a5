"""Same id, other content: a conflict reported per item with nothing written, or an update
recorded and undoable, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from store.database import Database
from store.db import session_factory
from store.errors import IdConflict
from store.kinds import MemoryStatus
from store.models import ConversationLog, MaintenanceRecord, Memory
from store.operations import SetStatus, UpdateMemory
from store.schemas import LogIn, MemoryIn
from store.write.undo import undo

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def mem(content: str, **fields: object) -> MemoryIn:
    return MemoryIn.model_validate({"content": content, **fields})


def log(content: str, key: str, **fields: object) -> LogIn:
    data = {"session_id": "s1", "role": "user", "timestamp": NOW.isoformat(), "content": content}
    return LogIn.model_validate({**data, "idempotency_key": key, **fields})


def counts(db: Database) -> tuple[int, int, int]:
    with session_factory(db.engine)() as session:
        return (
            int(session.scalar(select(func.count()).select_from(Memory)) or 0),
            int(session.scalar(select(func.count()).select_from(ConversationLog)) or 0),
            int(session.scalar(select(func.count()).select_from(MaintenanceRecord)) or 0),
        )


def test_add_memories_same_external_id_other_content_conflicts_nothing_written(
    db: Database,
) -> None:
    first = db.writer.add_memories("ns", [mem("likes tea", external_id="x1")], now=NOW)
    before = counts(db)
    batch = [mem("brand new"), mem("likes coffee", external_id="x1")]
    with pytest.raises(IdConflict) as caught:
        db.writer.add_memories("ns", batch, now=NOW, labels=["line 1", "line 2"])
    assert caught.value.problems == [
        (
            "line 2",
            f"names memory {first.ids[0]} with different content: to change it, ask for an "
            "update (API: on_conflict=update; CLI: --update)",
        )
    ]
    assert counts(db) == before
    assert caught.value.exit_code == 4
    assert "conflict, nothing written: line 2: names memory" in str(caught.value)


def test_add_memories_same_item_again_is_not_a_conflict(db: Database) -> None:
    item = mem("likes tea", external_id="x1", tags=["drinks", "tea"], importance=7)
    first = db.writer.add_memories("ns", [item], now=NOW)
    again = mem("likes tea", external_id="x1", tags=["tea", "drinks"], importance=7)
    second = db.writer.add_memories("ns", [again], now=NOW + HOUR)
    assert second.ids == first.ids
    assert (second.created, second.updated, second.record_id) == ((), (), None)


def test_an_item_without_external_id_is_the_stored_one_that_has_one(db: Database) -> None:
    first = db.writer.add_memories(
        "ns", [mem("tea", external_id="m1", session_id="s", timestamp=NOW)], now=NOW
    )
    again = db.writer.add_memories("ns", [mem("tea", session_id="s", timestamp=NOW)], now=NOW)
    assert (again.ids, again.created) == (first.ids, ())
    later = db.writer.add_memories(
        "ns", [mem("tea", session_id="s", timestamp=NOW + HOUR)], now=NOW
    )
    assert later.created == later.ids != first.ids  # another time: another memory


def test_add_memories_omitted_fields_do_not_conflict(db: Database) -> None:
    db.writer.add_memories("ns", [mem("likes tea", external_id="x1", tags=["a"])], now=NOW)
    result = db.writer.add_memories("ns", [mem("likes tea", external_id="x1")], now=NOW)
    assert result.skipped == 1


def test_add_memories_original_item_after_maintenance_changed_it_is_not_a_conflict(
    db: Database,
) -> None:
    item = mem("likes tea", external_id="x1")
    memory_id = db.writer.add_memories("ns", [item], now=NOW).ids[0]
    change = UpdateMemory(memory_id=memory_id, changes={"content": "likes green tea"})
    db.writer.apply("ns", "auditor", [change], now=NOW + HOUR)
    result = db.writer.add_memories("ns", [item], now=NOW + 2 * HOUR)
    assert (result.ids, result.created, result.updated) == ((memory_id,), (), ())
    stored = db.memories.get("ns", memory_id)
    assert stored is not None
    assert stored.content == "likes green tea"


def test_add_memories_two_items_same_external_id_other_content_conflict(db: Database) -> None:
    batch = [mem("a", external_id="x"), mem("same", external_id="y"), mem("b", external_id="x")]
    with pytest.raises(IdConflict) as caught:
        db.writer.add_memories("ns", batch, now=NOW)
    assert caught.value.problems == [
        ("item 2", "external_id 'x' is also on item 0, with different content")
    ]
    assert counts(db) == (0, 0, 0)


def test_add_memories_two_identical_items_are_one_memory(db: Database) -> None:
    batch = [mem("a", external_id="x"), mem("a", external_id="x")]
    result = db.writer.add_memories("ns", batch, now=NOW)
    assert result.ids[0] == result.ids[1]
    assert len(result.created) == 1


def test_add_memories_update_is_recorded_and_undone(db: Database) -> None:
    first = db.writer.add_memories(
        "ns", [mem("likes tea", external_id="x1", tags=["drinks"])], now=NOW
    )
    memory_id = first.ids[0]
    batch = [mem("likes coffee", external_id="x1", tags=["coffee"], importance=8), mem("new")]
    result = db.writer.add_memories("ns", batch, now=NOW + HOUR, on_conflict="update")
    assert result.updated == (memory_id,)
    assert len(result.created) == 1
    assert result.skipped == 0
    stored = db.memories.get("ns", memory_id)
    assert stored is not None
    assert (stored.content, stored.tags, stored.importance, stored.version) == (
        "likes coffee",
        ("coffee",),
        8,
        2,
    )
    assert result.record_id is not None
    record, operations = db.records.get(result.record_id)
    update = next(op for op in operations if op.target_id == memory_id)
    assert update.op == "update_memory"
    assert update.before is not None
    assert update.before["content"] == "likes tea"
    assert record.stats["updated"] == 1
    assert [r.id for r in db.records.history("ns", memory_id)] == [first.record_id, record.id]
    undo(db.writer, result.record_id, now=NOW + 2 * HOUR)
    restored = db.memories.get("ns", memory_id)
    assert restored is not None
    assert (restored.content, restored.tags) == ("likes tea", ("drinks",))


def test_add_memories_update_of_retired_memory_is_refused(db: Database) -> None:
    memory_id = db.writer.add_memories("ns", [mem("a", external_id="x")], now=NOW).ids[0]
    archive = SetStatus(memory_id=memory_id, status=MemoryStatus.ARCHIVED)
    db.writer.apply("ns", "test", [archive], now=NOW)
    with pytest.raises(IdConflict) as caught:
        db.writer.add_memories("ns", [mem("b", external_id="x")], now=NOW, on_conflict="update")
    assert "which is archived" in caught.value.problems[0][1]


def test_add_logs_same_key_other_content_conflicts_unless_update(db: Database) -> None:
    first = db.writer.add_logs("ns", [log("hello", "k1")], now=NOW)
    with pytest.raises(IdConflict) as caught:
        db.writer.add_logs("ns", [log("hi", "k2"), log("goodbye", "k1")], now=NOW)
    assert caught.value.problems[0][0] == "item 1"
    assert "names log line" in caught.value.problems[0][1]
    assert counts(db)[1] == 1
    updated = db.writer.add_logs("ns", [log("goodbye", "k1")], now=NOW, on_conflict="update")
    assert updated.updated == first.ids
    assert [line.content for line in db.work.logs("ns", first.ids)] == ["goodbye"]


def test_add_logs_two_lines_same_key_other_content_conflict(db: Database) -> None:
    with pytest.raises(IdConflict) as caught:
        db.writer.add_logs("ns", [log("a", "k"), log("b", "k")], now=NOW, on_conflict="update")
    assert caught.value.problems == [
        ("item 1", "idempotency_key 'k' is also on item 0, with different content")
    ]
    assert counts(db)[1] == 0
