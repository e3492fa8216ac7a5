"""Migrations that change existing SQLite stores: 0004 (ids never reused)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, text

from store.database import Database
from store.db import make_engine, upgrade
from store.schemas import MemoryIn

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MEMORY = (
    "INSERT INTO memories (id, namespace, content, content_hash, type, tags, importance,"
    " base_importance, access_count, event_time, created_at, updated_at, status, pinned, source,"
    " metadata, version) VALUES (:id, 'ns', :content, 'h', 'event', '[]', 5, 5.0, 0,"
    " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00', 'active', 0, 'api',"
    " '{}', 1)"
)


def _old_store(tmp_path: Path) -> Engine:
    """A 0003 store holding memories 1 and 2 and relation 1; a record names memory 3 (since
    undone) and relation 7."""
    engine = make_engine(f"sqlite:///{tmp_path}/old.db")
    upgrade(engine, "0003")
    with engine.begin() as connection:
        for memory_id in (1, 2):
            connection.execute(text(MEMORY), {"id": memory_id, "content": f"m{memory_id}"})
        connection.execute(
            text(
                "INSERT INTO memory_relations (id, namespace, source_id, target_id, type,"
                " strength, description, created_at)"
                " VALUES (1, 'ns', 1, 2, 'causal', 0.5, '', '2026-01-01 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO maintenance_records (id, job, namespace, status, started_at,"
                " prompts, tokens_in, tokens_out, stats)"
                " VALUES (1, 'extractor', 'ns', 'undone', '2026-01-01 00:00:00', '[]', 0, 0, '{}')"
            )
        )
        for seq, (kind, target) in enumerate((("memory", 3), ("relation", 7))):
            connection.execute(
                text(
                    "INSERT INTO maintenance_operations (record_id, seq, op, target_kind,"
                    " target_id) VALUES (1, :seq, 'create', :kind, :target)"
                ),
                {"seq": seq, "kind": kind, "target": target},
            )
    return engine


def test_before_0004_sqlite_hands_out_an_undone_id_again(tmp_path: Path) -> None:
    engine = _old_store(tmp_path)
    with engine.begin() as connection:
        connection.execute(text(MEMORY.replace(":id", "NULL")), {"content": "new"})
        reused = connection.execute(text("SELECT max(id) FROM memories")).scalar()
    engine.dispose()
    assert reused == 3  # the id the record names: the bug 0004 fixes


def test_0004_starts_ids_above_every_id_a_record_names_and_keeps_the_rows(
    tmp_path: Path,
) -> None:
    engine = _old_store(tmp_path)
    upgrade(engine)
    db = Database(engine)
    (fresh,) = db.writer.add_memories("ns", [MemoryIn(content="new", timestamp=NOW)], now=NOW).ids
    with engine.connect() as connection:
        contents = connection.execute(text("SELECT id, content FROM memories ORDER BY id")).all()
        sequences = {
            name: seq
            for name, seq in connection.execute(text("SELECT name, seq FROM sqlite_sequence"))
        }
        tables = {
            name: sql
            for name, sql in connection.execute(
                text("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            )
        }
        cascade = connection.execute(text("PRAGMA foreign_key_list(memory_relations)")).all()
        relations = connection.execute(text("SELECT id FROM memory_relations")).scalars().all()
        foreign_keys = connection.execute(text("PRAGMA foreign_keys")).scalar()
    engine.dispose()
    assert fresh == 4
    assert [tuple(row) for row in contents] == [(1, "m1"), (2, "m2"), (4, "new")]
    assert sequences["memory_relations"] == 7
    assert relations == [1]
    for table in ("memories", "memory_relations", "conversation_logs"):
        assert "AUTOINCREMENT" in tables[table], table
    # The recreated tables keep their foreign keys and what they do on delete; they are on.
    assert {row[2] for row in cascade} == {"memories"}
    assert {row[6] for row in cascade} == {"CASCADE"}
    assert foreign_keys == 1
