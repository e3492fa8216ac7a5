"""Restoring a namespace's export (`ingest` of `export --namespace`): every line validated and
named, relations kept inside one namespace, ids that clash reported; nothing written on any
problem. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from store.database import Database
from store.db import make_engine, session_factory, upgrade
from store.errors import IdConflict, ValidationFailed
from store.models import MaintenanceRecord, Memory, MemoryRelation
from store.operations import CreateRelation
from store.schemas import MemoryIn
from store.text import content_hash

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Database]:
    """Another store (SQLite) to export from; ``db`` is the one restored into."""
    engine = make_engine(f"sqlite:///{tmp_path / 'source.db'}")
    upgrade(engine)
    yield Database(engine)
    engine.dispose()


def fill(db: Database, namespace: str = "ns") -> list[dict[str, Any]]:
    """Three memories and a relation in ``namespace``; return its export as objects."""
    items = [MemoryIn(content=text, external_id=f"{namespace}-{text}") for text in "abc"]
    ids = db.writer.add_memories(namespace, items, now=NOW).ids
    relation = CreateRelation(source=ids[0], target=ids[2], type="causal", strength=0.5)
    db.writer.apply(namespace, "test", [relation], now=NOW)
    return [json.loads(line) for line in db.memories.export(namespace)]


def rows(db: Database) -> tuple[int, int, int]:
    with session_factory(db.engine)() as session:
        return tuple(  # type: ignore[return-value]
            int(session.scalar(select(func.count()).select_from(model)) or 0)
            for model in (Memory, MemoryRelation, MaintenanceRecord)
        )


def labels(count: int) -> list[str]:
    return [f"line {n}" for n in range(1, count + 1)]


def test_restore_bad_lines_each_named_nothing_written(db: Database, source: Database) -> None:
    lines = fill(source)
    broken = [dict(line) for line in lines]
    del broken[0]["content"]
    broken[1]["importance"] = "high"
    broken[2]["event_time"] = "last tuesday"
    broken[3]["source_id"] = 999  # the relation: to a memory that is nowhere
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("ns", broken, now=NOW, labels=labels(4))
    assert caught.value.problems == [
        ("line 1", "content: is required"),
        ("line 2", "importance: should be a whole number"),
        ("line 3", "event_time: not an ISO-8601 time: 'last tuesday'"),
    ]
    assert rows(db) == (0, 0, 0)
    # With the memories fine, the relation to a memory that is nowhere is the one problem.
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("ns", [*lines[:3], broken[3]], now=NOW, labels=labels(4))
    assert caught.value.problems == [
        ("line 4", "memory 999 is neither in the file nor in namespace 'ns'")
    ]
    assert rows(db) == (0, 0, 0)


def test_restore_relation_to_memory_in_store_is_fine(db: Database) -> None:
    lines = fill(db)
    relation = next(line for line in lines if line["kind"] == "relation")
    extra = {**relation, "id": relation["id"] + 1, "type": "thematic"}
    result = db.writer.restore("ns", [extra], now=NOW)
    assert result.record_id is not None
    assert rows(db)[1] == 2


def test_restore_cross_namespace_relation_line_refused(db: Database) -> None:
    fill(db, "a")
    b_lines = fill(db, "b")
    a_memory = db.memories.by_external_id("a", "a-a")
    assert a_memory is not None
    relation = next(line for line in b_lines if line["kind"] == "relation")
    crafted = {**relation, "id": 99, "type": "thematic", "target_id": a_memory.id}
    before = rows(db)
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("b", [crafted], now=NOW)
    assert caught.value.problems == [
        (
            "item 0",
            f"relation of namespace 'b' joins memory {a_memory.id} of namespace 'a': "
            "a relation stays inside one namespace",
        )
    ]
    # The same crafted line inside one file: refused without the store's help.
    memory = next(line for line in b_lines if line["kind"] == "memory")
    moved = {**memory, "namespace": "a"}
    with pytest.raises(ValidationFailed, match="a relation stays inside one namespace"):
        db.writer.restore("b", [moved, relation], now=NOW)
    assert rows(db) == before


def test_restore_line_of_other_namespace_names_import(db: Database) -> None:
    lines = fill(db, "a")
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("b", lines[:1], now=NOW)
    assert caught.value.problems == [
        (
            "item 0",
            "a line of namespace 'a', not 'b': to restore an export into another namespace, "
            "use `secretary import FILE --namespace NEW`",
        )
    ]


def test_restore_same_id_other_content_is_conflict(db: Database) -> None:
    lines = fill(db)
    changed = {**lines[0], "content": "rewritten", "content_hash": content_hash("rewritten")}
    before = rows(db)
    with pytest.raises(IdConflict) as caught:
        db.writer.restore("ns", [changed], now=NOW, labels=["line 1"])
    assert caught.value.problems == [
        ("line 1", f"memory {lines[0]['id']} is in the store with other content")
    ]
    assert rows(db) == before


def test_restore_two_lines_same_id_other_content_refused(db: Database, source: Database) -> None:
    lines = fill(source)
    twin = {**lines[0], "importance": 9}
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("ns", [lines[0], twin], now=NOW, labels=labels(2))
    assert caught.value.problems == [
        ("line 2", f"memory {lines[0]['id']} is also on line 1, with other content")
    ]


def test_restore_whole_store_line_points_to_import(db: Database) -> None:
    log = {"kind": "log", "id": 1}
    with pytest.raises(ValidationFailed) as caught:
        db.writer.restore("ns", [log], now=NOW)
    assert caught.value.problems == [
        ("item 0", "a log line of a whole-store export: restore it with `secretary import FILE`")
    ]


def test_restore_into_empty_store_then_new_ids_do_not_collide(
    db: Database, source: Database
) -> None:
    lines = fill(source)
    db.writer.restore("ns", lines, now=NOW)
    fresh = db.writer.add_memories("ns", [MemoryIn(content="later")], now=NOW)
    assert fresh.ids[0] > max(line["id"] for line in lines if line["kind"] == "memory")
    relation = CreateRelation(source=fresh.ids[0], target=1, type="temporal", strength=0.1)
    db.writer.apply("ns", "test", [relation], now=NOW)
    assert rows(db)[1] == 2


def test_restore_with_namespace_rewritten_names_import(db: Database) -> None:
    lines = fill(db, "a")
    rewritten = [{**line, "namespace": "b"} for line in lines]
    with pytest.raises(IdConflict) as caught:
        db.writer.restore("b", rewritten, now=NOW)
    assert len(caught.value.problems) == len(lines)
    assert caught.value.problems[0] == (
        "item 0",
        f"memory {lines[0]['id']} is in the store, in another namespace: ids belong to one "
        "store; to copy an export into another namespace, use `secretary import FILE "
        "--namespace NEW`",
    )
