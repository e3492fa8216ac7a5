"""The whole store out and back in (`export --all`, `import`), on SQLite and PostgreSQL: an
identical round trip, validation with nothing written, and a move into another namespace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store.database import Database
from store.db import make_engine, session_factory, upgrade
from store.errors import IdConflict, ValidationFailed
from store.exports.backup import ImportReport, export_store, import_export
from store.exports.lines import parse_export
from store.kinds import MemoryStatus
from store.models import IndexOutbox, Memory
from store.operations import CreateRelation, SetStatus, UpdateMemory
from store.schemas import LogIn, MemoryIn
from store.write.undo import undo

NOW = datetime(2026, 1, 10, 12, 0, 0, 123456, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def other(tmp_path: Path) -> Iterator[Database]:
    """A second, empty store (SQLite)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'other.db'}")
    upgrade(engine)
    yield Database(engine)
    engine.dispose()


def fill(db: Database, namespace: str = "maya") -> None:
    """A store with a bit of everything: memories of every kind of status, relations, logs,
    records (an undone one and a log line's update among them), job state and a schedule
    override."""
    items = [
        MemoryIn(content="adopted a cat named Pepper", external_id="m1", tags=("pets",)),
        MemoryIn.model_validate(
            {"content": "ran a half marathon", "metadata": {"time": "1:52", "km": 21.1}}
        ),
        MemoryIn(content="likes green tea", type="preference", importance=8, session_id="s1"),
        MemoryIn(content="likes tea", type="preference"),
    ]
    ids = db.writer.add_memories(namespace, items, now=NOW).ids
    ops = [
        CreateRelation(source=ids[0], target=ids[1], type="temporal", strength=0.4),
        SetStatus(memory_id=ids[3], status=MemoryStatus.MERGED, replaced_by=ids[2]),
    ]
    db.writer.apply(namespace, "auditor", ops, now=NOW + HOUR, job_state={"watermark": ids[3]})
    edit = db.writer.apply(
        namespace, "test", [UpdateMemory(memory_id=ids[1], changes={"importance": 9})], now=NOW
    )
    assert edit.record_id is not None
    undo(db.writer, edit.record_id, now=NOW + 2 * HOUR)
    logs = [
        LogIn(session_id="s1", role="user", content="I adopted a cat!", timestamp=NOW),
        LogIn(session_id="s1", role="assistant", content="Lovely!", timestamp=NOW, pair_id="p"),
        LogIn(
            session_id="s1", role="user", content="Pepper hid", timestamp=NOW, idempotency_key="k1"
        ),
    ]
    db.writer.add_logs(namespace, logs, now=NOW)
    fixed = LogIn(
        session_id="s1",
        role="user",
        content="Pepper hid all day",
        timestamp=NOW,
        idempotency_key="k1",
    )
    db.writer.add_logs(namespace, [fixed], now=NOW + HOUR, on_conflict="update")
    db.schedules.set_cron("auditor", "0 3 * * *", now=NOW)
    db.schedules.set_paused("linker", True, now=NOW)


def bring(db: Database, lines: list[str], namespace: str | None = None) -> ImportReport:
    labels = [f"line {n}" for n in range(1, len(lines) + 1)]
    export, problems = parse_export([json.loads(line) for line in lines], labels)
    assert problems == []
    return import_export(db.engine, export, now=NOW, namespace=namespace)


def test_export_all_holds_every_kind_deterministically(db: Database) -> None:
    fill(db)
    lines = list(export_store(db.engine))
    assert lines == list(export_store(db.engine))
    kinds = [json.loads(line)["kind"] for line in lines]
    order = ["memory", "relation", "log", "record", "job_state", "schedule"]
    assert kinds == sorted(kinds, key=order.index)
    assert set(kinds) == {"memory", "relation", "log", "record", "job_state", "schedule"}
    records = [json.loads(line) for line in lines if '"kind":"record"' in line]
    assert any(r["undone_by_id"] for r in records)
    assert any(r["undoes_id"] for r in records)
    assert all(isinstance(r["operations"], list) for r in records)


def test_round_trip_into_empty_store_gives_identical_export(db: Database, other: Database) -> None:
    fill(db)
    fill(db, "sam")
    lines = list(export_store(db.engine))
    report = bring(other, lines)
    assert report.present == 0
    assert report.total == len(lines)
    assert list(export_store(other.engine)) == lines


def test_round_trip_from_sqlite_into_this_backend(db: Database, other: Database) -> None:
    fill(other)
    lines = list(export_store(other.engine))
    bring(db, lines)
    assert list(export_store(db.engine)) == lines
    # The imported store goes on: new ids after the imported ones, undo of an imported record.
    fresh = db.writer.add_memories("maya", [MemoryIn(content="new")], now=NOW + 3 * HOUR)
    memories = [json.loads(line) for line in lines if '"kind":"memory"' in line]
    assert fresh.ids[0] > max(memory["id"] for memory in memories)
    with session_factory(db.engine)() as session:
        queued = session.scalars(select(IndexOutbox.memory_id).order_by(IndexOutbox.id)).all()
    active = {m.id for m in db.memories.many("maya", range(1, 5)) if m.status == "active"}
    assert set(queued) >= active


def test_import_again_changes_nothing(db: Database) -> None:
    fill(db)
    lines = list(export_store(db.engine))
    report = bring(db, lines)
    assert (report.total, report.present) == (0, len(lines))
    assert list(export_store(db.engine)) == lines


def test_import_same_id_other_content_conflict_nothing_written(
    db: Database, other: Database
) -> None:
    fill(db)
    fill(other)
    with session_factory(other.engine, write=True)() as session, session.begin():
        session.get(Memory, 1).importance = 2  # type: ignore[union-attr]
    lines = list(export_store(other.engine))
    before = list(export_store(db.engine))
    with pytest.raises(IdConflict) as caught:
        bring(db, lines)
    assert caught.value.problems == [("line 1", "memory 1 is in the store with other content")]
    assert list(export_store(db.engine)) == before


def test_import_bad_lines_named_nothing_written(db: Database, other: Database) -> None:
    fill(other)
    objects = [json.loads(line) for line in export_store(other.engine)]
    log = next(i for i, o in enumerate(objects) if o["kind"] == "log")
    record = next(i for i, o in enumerate(objects) if o["kind"] == "record")
    objects[log]["timestamp"] = "not a time"
    del objects[record]["operations"]
    labels = [f"line {n}" for n in range(1, len(objects) + 1)]
    _, problems = parse_export(objects, labels)
    assert problems == [
        (f"line {log + 1}", "timestamp: not an ISO-8601 time: 'not a time'"),
        (f"line {record + 1}", "operations: is required"),
    ]


def test_import_relation_across_namespaces_refused(db: Database, other: Database) -> None:
    fill(other, "a")
    fill(other, "b")
    objects = [json.loads(line) for line in export_store(other.engine)]
    relation = next(o for o in objects if o["kind"] == "relation" and o["namespace"] == "b")
    a_memory = next(o for o in objects if o["kind"] == "memory" and o["namespace"] == "a")
    relation["target_id"] = a_memory["id"]
    labels = [f"line {n}" for n in range(1, len(objects) + 1)]
    _, problems = parse_export(objects, labels)
    assert len(problems) == 1
    assert problems[0][1].endswith("a relation stays inside one namespace")


def test_import_into_new_namespace_moves_ids(db: Database, other: Database) -> None:
    fill(db, "maya")
    fill(other, "maya")
    lines = list(export_store(other.engine))
    report = bring(db, lines, namespace="copy")
    assert report.namespace == "copy"
    assert report.schedules_left == 2
    originals = sorted(db.memories.many("maya", range(1, 100)), key=lambda m: m.id)
    copies = sorted(db.memories.many("copy", range(1, 10_000)), key=lambda m: m.id)
    assert [m.content for m in copies] == [m.content for m in originals]
    assert [m.external_id for m in copies] == [m.external_id for m in originals]
    offset = copies[0].id - originals[0].id
    assert offset > max(m.id for m in originals)
    merged = next(m for m in copies if m.status == MemoryStatus.MERGED)
    assert merged.replaced_by_id == next(m.id for m in copies if m.content == "likes green tea")
    relations = db.listing.relations("copy", copies[0].id)
    assert [r.other_id for r in relations] == [copies[1].id]
    state = db.work.job_state("auditor", "copy")
    assert state == {"watermark": db.work.job_state("auditor", "maya")["watermark"] + offset}
    history = db.records.history("copy", copies[1].id)
    assert [r.namespace for r in history] == ["copy"] * len(history)
    # A moved record can be undone like any other.
    undone = undo(db.writer, history[-1].id, now=NOW + 5 * HOUR)
    assert undone.record_id is not None


def test_import_into_namespace_that_holds_something_refused(db: Database, other: Database) -> None:
    fill(db, "copy")
    fill(other)
    before = list(export_store(db.engine))
    with pytest.raises(ValidationFailed) as caught:
        bring(db, list(export_store(other.engine)), namespace="copy")
    assert caught.value.problems[0][0] == "--namespace"
    assert "already holds memories, conversation logs, records, job state" in str(caught.value)
    fill(other, "second")
    with pytest.raises(ValidationFailed, match="holds namespaces maya, second"):
        bring(db, list(export_store(other.engine)), namespace="new")
    assert list(export_store(db.engine)) == before


def test_import_rows_count(db: Database, other: Database) -> None:
    fill(other)
    report = bring(db, list(export_store(other.engine)))
    assert report.added == {
        "memory": 4,
        "relation": 1,
        "log": 3,
        "record": 5,  # the last, a log line's update
        "job_state": 1,
        "schedule": 2,
    }
    with session_factory(db.engine)() as session:
        assert session.scalar(select(func.count()).select_from(Memory)) == 4
