"""An ingest that updates conversation log lines (on_conflict="update") is recorded with
before/after images, told by the record's diff, undone exactly, and redone by undoing the undo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from store.database import Database
from store.kinds import RecordStatus
from store.schemas import LogIn
from store.shapes.diff import diff_json, record_diff
from store.shapes.records import record_show_json
from store.write import edits
from store.write.forget import ForgetSelection, LogFilter
from store.write.undo import UndoConflict, undo

NOW = datetime(2026, 5, 1, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)


def line(content: str, key: str, **fields: Any) -> LogIn:
    values: dict[str, Any] = {"session_id": "s", "role": "user", "timestamp": NOW}
    return LogIn(content=content, idempotency_key=key, **(values | fields))


def updated(db: Database) -> tuple[list[int], int]:
    """Store two lines, then update the first; return the ids and the update's record."""
    ids = list(db.writer.add_logs("ns", [line("hello", "k1"), line("hi", "k2")], now=NOW).ids)
    result = db.writer.add_logs(
        "ns",
        [line("goodbye", "k1", role="assistant"), line("new", "k3")],
        now=LATER,
        on_conflict="update",
    )
    assert result.updated == (ids[0],)
    assert result.record_id is not None
    return ids, result.record_id


def test_an_update_of_a_line_is_recorded_with_its_images_new_lines_are_not(db: Database) -> None:
    first = db.writer.add_logs("ns", [line("hello", "k1")], now=NOW)
    assert first.record_id is None  # new lines are input, not a change
    assert db.records.find(limit=10) == []
    again = db.writer.add_logs("ns", [line("hello", "k1")], now=NOW, on_conflict="update")
    assert again.record_id is None  # the same line: nothing changed

    result = db.writer.add_logs(
        "ns",
        [line("goodbye", "k1", role="assistant"), line("new", "k3")],
        now=LATER,
        on_conflict="update",
    )

    record, operations = db.records.get(result.record_id or 0)
    assert (record.job, record.status) == ("ingest", RecordStatus.APPLIED)
    assert record.stats["updated"] == 1
    (op,) = operations  # the new line is not among them
    assert (op.op, op.target_kind, op.target_id) == ("update_log", "log", first.ids[0])
    assert op.before is not None
    assert op.after is not None
    assert (op.before["content"], op.before["role"]) == ("hello", "user")
    assert (op.after["content"], op.after["role"]) == ("goodbye", "assistant")
    assert op.before["idempotency_key"] == op.after["idempotency_key"] == "k1"


def test_the_diff_of_a_line_update_tells_it_readably(db: Database) -> None:
    ids, record_id = updated(db)
    record, operations = db.records.get(record_id)

    diff = record_diff(record, operations, lambda wanted: {})

    (entry,) = diff.entries
    assert entry.kind == "log_updated"
    assert entry.line == f'log line #{ids[0]} updated: "hello" -> "goodbye"'
    assert entry.details == ('role: "user" -> "assistant"',)
    assert dict(diff.changes) == {"logs_updated": 1}
    shown = diff_json(diff)["entries"][0]
    assert (shown["log_id"], shown["before"], shown["after"]) == (ids[0], "hello", "goodbye")
    assert record_show_json(record, operations)["changes_by_kind"] == {"logs_updated": 1}


def test_undo_of_a_line_update_restores_it_exactly_and_undo_of_the_undo_redoes_it(
    db: Database,
) -> None:
    ids, record_id = updated(db)
    after = db.work.logs("ns", ids)

    undone = undo(db.writer, record_id, now=LATER)

    assert undone.restored == 1
    (restored, untouched) = db.work.logs("ns", ids)
    assert (restored.content, restored.role) == ("hello", "user")
    assert untouched.content == "hi"
    record, operations = db.records.get(undone.record_id)
    assert record.job == "undo"
    assert [(op.op, op.target_kind) for op in operations] == [("update_log", "log")]
    told = record_diff(record, operations, lambda wanted: {})
    assert told.entries[0].line == f'log line #{ids[0]} put back: "goodbye" -> "hello"'

    redone = undo(db.writer, undone.record_id, now=LATER)

    assert redone.restored == 1
    assert db.work.logs("ns", ids) == after
    assert db.records.get(record_id)[0].status == RecordStatus.APPLIED  # in force again


def test_undo_of_a_line_update_conflicts_when_the_line_changed_since(db: Database) -> None:
    ids, record_id = updated(db)
    db.writer.add_logs("ns", [line("see you", "k1")], now=LATER, on_conflict="update")

    with pytest.raises(UndoConflict, match=f"log {ids[0]}: changed since"):
        undo(db.writer, record_id, now=LATER)

    assert db.work.logs("ns", ids[:1])[0].content == "see you"


def test_forgetting_an_updated_line_erases_both_texts_and_undo_then_refuses(
    db: Database,
) -> None:
    ids, record_id = updated(db)

    edits.forget(db.writer, "ns", ForgetSelection(log_filter=LogFilter(keys=("k1",))), now=LATER)

    _, operations = db.records.get(record_id)
    (op,) = operations
    assert op.before is not None
    assert op.after is not None
    assert op.before["forgotten"]
    assert op.after["forgotten"]
    assert "hello" not in str(op.before)
    assert "goodbye" not in str(op.after)
    assert op.before["content_hash"] != op.after["content_hash"]  # what they were, hashed
    with pytest.raises(UndoConflict, match="erased since"):
        undo(db.writer, record_id, now=LATER)
    assert [view.id for view in db.work.logs("ns", ids)] == [ids[1]]
