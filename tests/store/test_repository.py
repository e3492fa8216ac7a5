"""The writer and the reads on SQLite and PostgreSQL: ingestion, timeline, records, outbox,
export."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select

from secretary.llm.budget import Budget, TokenLedger
from secretary.llm.errors import BudgetExhausted
from store.database import Database
from store.db import session_factory
from store.errors import ValidationFailed
from store.kinds import MemoryStatus, Outcome
from store.models import IndexOutbox, MaintenanceRecord
from store.operations import CreateRelation, SetStatus, UpdateMemory
from store.schemas import Limits, LogIn, MemoryIn, parse_items
from store.views import RecordView
from store.write.record_info import RecordInfo
from store.write.undo import undo
from store.write.unit import UnitOfWork
from tests.helpers.timeline import timeline

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def mem(content: str, when: datetime | None = None, **kw: object) -> MemoryIn:
    return MemoryIn.model_validate({"content": content, "timestamp": when, **kw})


def set_status(
    db: Database, namespace: str, ids: list[int], status: MemoryStatus, *, now: datetime
) -> int | None:
    """Change the status of memories through the writer; return the record id."""
    operations = [SetStatus(memory_id=i, status=status) for i in ids]
    return db.writer.apply(namespace, "test", operations, now=now).record_id


def relate(db: Database, source: int, target: int, type_: str, strength: float) -> None:
    operation = CreateRelation(source=source, target=target, type=type_, strength=strength)
    db.writer.apply("ns", "test", [operation], now=NOW)


def records(db: Database, namespace: str) -> list[RecordView]:
    return list(db.records.find(namespaces=[namespace], limit=100))


def test_add_memories_same_batch_twice_changes_nothing(db: Database) -> None:
    items = [mem("went hiking", NOW), mem("likes tea", NOW + DAY, external_id="x1")]
    first = db.writer.add_memories("ns", items, now=NOW)
    exported = list(db.memories.export("ns"))
    second = db.writer.add_memories("ns", items, now=NOW + DAY)
    assert len(first.created) == 2
    assert second.created == ()
    assert second.ids == first.ids
    assert second.record_id is None
    assert list(db.memories.export("ns")) == exported
    assert len(records(db, "ns")) == 1


def test_add_memories_out_of_order_links_timeline_by_event_time(db: Database) -> None:
    days = list(range(12))
    random.Random(7).shuffle(days)
    for day in days:
        db.writer.add_memories("ns", [mem(f"event on day {day}", NOW + day * DAY)], now=NOW)
    order = timeline(db, "ns")
    contents = [db.memories.get("ns", i).content for i in order]  # type: ignore[union-attr]
    assert contents == [f"event on day {d}" for d in range(12)]


@pytest.mark.parametrize("seed", range(6))
def test_add_memories_batch_links_like_one_by_one_and_undoes(db: Database, seed: int) -> None:
    """A batch interleaved with stored memories (ties in time included) lands in (event_time,
    id) order, every stored neighbour's link recorded: undoing the batch restores the
    timeline as it was."""
    rng = random.Random(seed)
    stored = [mem(f"stored {i}", NOW + rng.randrange(8) * DAY) for i in range(rng.randrange(6))]
    for item in stored:  # one by one, each in its own unit
        db.writer.add_memories("ns", [item], now=NOW)
    before = timeline(db, "ns")
    batch = [mem(f"new {i}", NOW + rng.randrange(-1, 9) * DAY) for i in range(rng.randrange(1, 12))]
    added = db.writer.add_memories("ns", batch, now=NOW)
    every = db.memories.many("ns", [*before, *added.ids])
    assert timeline(db, "ns") == [m.id for m in sorted(every, key=lambda m: (m.event_time, m.id))]
    assert added.record_id is not None
    undo(db.writer, added.record_id, now=NOW + DAY)
    assert timeline(db, "ns") == before


def test_a_new_event_time_in_another_offset_moves_the_memory_by_its_utc_time(
    db: Database,
) -> None:
    """11:30 UTC written as 16:30+05:00 goes between 11:00 and 12:00 UTC (compared as wall
    clock, 16:30 would sort after 12:00), whether it is ingested or an edit moves it there."""
    early, middle, late = db.writer.add_memories(
        "ns", [mem(f"at {h}:00", NOW.replace(hour=h)) for h in (10, 11, 12)], now=NOW
    ).ids
    half_past = NOW.replace(hour=11, minute=30).astimezone(timezone(timedelta(hours=5)))
    (added,) = db.writer.add_memories("ns", [mem("at 11:30", half_past)], now=NOW).ids
    assert timeline(db, "ns") == [early, middle, added, late]
    db.writer.apply(
        "ns", "test", [UpdateMemory(memory_id=early, changes={"event_time": half_past})], now=NOW
    )
    assert timeline(db, "ns") == [middle, early, added, late]  # same time: by id


def test_add_memories_equal_times_keep_arrival_order(db: Database) -> None:
    result = db.writer.add_memories("ns", [mem(f"turn {i}", NOW) for i in range(5)], now=NOW)
    assert timeline(db, "ns") == list(result.ids)


def test_add_memories_timelines_are_per_namespace(db: Database) -> None:
    db.writer.add_memories("a", [mem("a1", NOW), mem("a2", NOW + DAY)], now=NOW)
    db.writer.add_memories("b", [mem("b1", NOW + DAY / 2)], now=NOW)
    assert len(timeline(db, "a")) == 2
    assert len(timeline(db, "b")) == 1


def test_add_memories_failure_mid_batch_writes_nothing(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.writer.add_memories("ns", [mem("before", NOW)], now=NOW)
    before = list(db.memories.export("ns"))
    nearest = UnitOfWork._nearest
    calls = []

    def nearest_then_fail(unit: UnitOfWork, *args: Any, **kwargs: Any) -> int | None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("crash after the batch was inserted, while linking it")
        return nearest(unit, *args, **kwargs)

    monkeypatch.setattr(UnitOfWork, "_nearest", nearest_then_fail)
    with pytest.raises(RuntimeError, match="crash"):
        db.writer.add_memories("ns", [mem("fine", NOW + DAY), mem("also", NOW + 2 * DAY)], now=NOW)
    assert list(db.memories.export("ns")) == before
    assert db.work.outbox_size() == 1
    assert len(records(db, "ns")) == 1


def test_parse_items_bad_lines_reported_with_labels() -> None:
    raw = [
        {"content": "ok"},
        {"content": ""},
        {"content": "x", "importance": 11},
        {"content": "y", "colour": "red"},
        "not an object",
        {"content": "z" * 50},
    ]
    labels = [f"line {i + 1}" for i in range(len(raw))]
    parsed, problems = parse_items(MemoryIn, raw, Limits(max_content_chars=40), labels=labels)
    assert len(parsed) == 1
    where = [label for label, _ in problems]
    assert where == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert "colour: is not a known field" in problems[2][1]
    assert "max_content_chars" in problems[4][1]


def test_add_memories_writes_record_with_images_and_outbox(db: Database) -> None:
    first = db.writer.add_memories("ns", [mem("one", NOW)], now=NOW)
    second = db.writer.add_memories("ns", [mem("zero", NOW - DAY)], now=NOW)
    record, operations = db.records.get(second.record_id)  # type: ignore[arg-type]
    assert record.job == "ingest"
    assert record.status == "applied"
    kinds = [(op.op, op.target_id) for op in operations]
    assert kinds == [("create_memory", second.ids[0]), ("update_memory", first.ids[0])]
    update = operations[1]
    assert update.before is not None
    assert update.after is not None
    assert update.before["prev_id"] is None
    assert update.after["prev_id"] == second.ids[0]
    with session_factory(db.engine)() as session:
        outbox = session.scalars(select(IndexOutbox.memory_id).order_by(IndexOutbox.id)).all()
    # A link change is not content: only the new memory goes to the vector index.
    assert outbox == [first.ids[0], second.ids[0]]


def test_set_status_bumps_version_and_queues_delete(db: Database) -> None:
    result = db.writer.add_memories("ns", [mem("stale fact", NOW)], now=NOW)
    revision = db.search.revision("ns")
    set_status(db, "ns", list(result.ids), MemoryStatus.ARCHIVED, now=NOW)
    memory = db.memories.get("ns", result.ids[0])
    assert memory is not None
    assert memory.status == "archived"
    assert memory.version == 2
    assert db.search.revision("ns") == revision + 1
    assert db.memories.active("ns", result.ids) == {}
    entries = db.work.outbox(limit=10)
    assert [entry.memory_id for entry in entries] == [result.ids[0]] * 2
    # OutboxEntry carries no action: read the entries' actions from their rows.
    with session_factory(db.engine)() as session:
        actions = session.scalars(select(IndexOutbox.action).order_by(IndexOutbox.id)).all()
    assert actions == ["upsert", "delete"]


def test_reinforce_counts_and_bounds_base_importance(db: Database) -> None:
    result = db.writer.add_memories("ns", [mem("a", NOW, importance=9), mem("b", NOW)], now=NOW)
    a, b = result.ids
    later = NOW + DAY
    db.writer.reinforce({a: 30, b: 1}, now=later, step=0.1, max_boost=2.0)
    memory_a, memory_b = db.memories.get("ns", a), db.memories.get("ns", b)
    assert memory_a is not None
    assert memory_b is not None
    assert memory_a.access_count == 30
    assert memory_a.base_importance == pytest.approx(10.0)  # capped at 10
    assert memory_b.base_importance == pytest.approx(5.1)
    assert memory_b.last_accessed == later
    assert memory_b.version == 1  # recall is not a content change


def test_export_is_deterministic_and_restores_into_empty_store(
    db: Database, tmp_path: object
) -> None:
    db.writer.add_memories(
        "ns",
        [mem("a", NOW, tags=["x"], metadata={"k": "v"}), mem("b", NOW + DAY, session_id="s1")],
        now=NOW,
    )
    ids = db.writer.add_memories("ns", [mem("c", NOW - DAY)], now=NOW).ids
    relate(db, 1, ids[0], "causal", strength=0.7)
    set_status(db, "ns", [2], MemoryStatus.SUPERSEDED, now=NOW)
    exported = list(db.memories.export("ns"))
    assert exported == list(db.memories.export("ns"))
    assert {json.loads(line)["kind"] for line in exported} == {"memory", "relation"}
    # Restoring an export over itself is a no-op.
    db.writer.restore("ns", [json.loads(line) for line in exported], now=NOW)
    assert list(db.memories.export("ns")) == exported


def test_restore_into_fresh_database_reproduces_export(db: Database, sqlite_db: Database) -> None:
    db.writer.add_memories("ns", [mem("a", NOW), mem("b", NOW + DAY), mem("c", NOW - DAY)], now=NOW)
    relate(db, 1, 3, "thematic", strength=0.3)
    exported = list(db.memories.export("ns"))
    sqlite_db.writer.restore("ns", [json.loads(line) for line in exported], now=NOW)
    assert list(sqlite_db.memories.export("ns")) == exported


def test_restore_other_namespace_rejected(db: Database) -> None:
    db.writer.add_memories("a", [mem("x", NOW)], now=NOW)
    lines = [json.loads(line) for line in db.memories.export("a")]
    with pytest.raises(ValidationFailed, match="namespace"):
        db.writer.restore("b", lines, now=NOW)


def test_add_logs_idempotent_by_key(db: Database) -> None:
    logs = [
        LogIn(session_id="s", role="user", content="hi", timestamp=NOW),
        LogIn(
            session_id="s", role="assistant", content="hello", timestamp=NOW, idempotency_key="k2"
        ),
    ]
    first = db.writer.add_logs("ns", logs, now=NOW)
    second = db.writer.add_logs("ns", logs, now=NOW)
    assert len(first.created) == 2
    assert second.created == ()
    assert second.ids == first.ids


def test_memory_history_lists_touching_records(db: Database) -> None:
    first = db.writer.add_memories("ns", [mem("a", NOW)], now=NOW)
    db.writer.add_memories("ns", [mem("b", NOW + DAY)], now=NOW)
    archive = set_status(db, "ns", list(first.ids), MemoryStatus.ARCHIVED, now=NOW)
    history = db.records.history("ns", first.ids[0])
    assert [r.id for r in history] == [first.record_id, first.record_id + 1, archive]  # type: ignore[operator]
    assert db.records.history("other", first.ids[0]) == []


def test_unit_without_changes_leaves_no_record(db: Database) -> None:
    with db.writer.unit("ns", "noop", NOW):
        pass
    with session_factory(db.engine)() as session:
        assert session.scalar(select(func.count()).select_from(MaintenanceRecord)) == 0


def test_llm_tokens_recorded_per_utc_day_count_across_runs(db: Database) -> None:
    def spend(when: datetime, tokens_in: int, tokens_out: int, namespace: str = "ns") -> None:
        info = RecordInfo(outcome=Outcome.NOTHING, tokens_in=tokens_in, tokens_out=tokens_out)
        db.writer.apply(namespace, "extractor", (), now=when, info=info)

    for offset in range(9):
        spend(NOW + offset * DAY, 60 + offset, 40)
    spend(NOW + 8 * DAY + timedelta(hours=11), 0, 1)  # a later run, 23:00 UTC the same day
    spend(NOW + 8 * DAY + timedelta(hours=12), 500, 500)  # the next UTC day
    spend(NOW + 8 * DAY, 700, 0, namespace="other")
    day = (NOW + 8 * DAY).date()
    ledger = TokenLedger(db.records.tokens_on)  # a new run's ledger sees earlier runs' records
    assert ledger.used_today("ns", day) == 109
    assert ledger.used_today("ns", NOW.date()) == 100  # each day apart
    assert ledger.used_today("other", day) == 700
    assert ledger.used_today("nobody", day) == 0
    budget = Budget(namespace="ns", now=NOW + 8 * DAY, max_tokens_per_day=150, ledger=ledger)
    budget.ensure_affordable(41)
    with pytest.raises(BudgetExhausted):
        budget.ensure_affordable(50)
