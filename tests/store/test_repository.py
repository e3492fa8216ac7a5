"""The repository on SQLite and PostgreSQL: ingestion, timeline, records, outbox, export."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from store.errors import ValidationFailed
from store.models import IndexOutbox, MaintenanceRecord, Memory, MemoryStatus
from store.repository import Repository
from store.schemas import Limits, LogIn, MemoryIn, parse_items

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def timeline(repo: Repository, namespace: str) -> list[int]:
    """Walk the timeline from its head through next_id and check prev_id on the way back.

    Merged memories are off the timeline: their summary took their place.
    """
    with repo.reading() as session:
        query = select(Memory).where(Memory.namespace == namespace, Memory.status != "merged")
        rows = {m.id: m for m in session.scalars(query)}
    heads = [m for m in rows.values() if m.prev_id is None]
    assert len(heads) <= 1, "a timeline has exactly one head"
    order: list[int] = []
    current = heads[0] if heads else None
    while current is not None:
        order.append(current.id)
        nxt = rows.get(current.next_id) if current.next_id is not None else None
        if nxt is not None:
            assert nxt.prev_id == current.id
        current = nxt
    assert len(order) == len(rows), "every memory is on the timeline"
    return order


def mem(content: str, when: datetime | None = None, **kw: object) -> MemoryIn:
    return MemoryIn.model_validate({"content": content, "timestamp": when, **kw})


def test_add_memories_same_batch_twice_changes_nothing(repo: Repository) -> None:
    items = [mem("went hiking", NOW), mem("likes tea", NOW + DAY, external_id="x1")]
    first = repo.add_memories("ns", items, now=NOW)
    exported = list(repo.export("ns"))
    second = repo.add_memories("ns", items, now=NOW + DAY)
    assert len(first.created) == 2
    assert second.created == ()
    assert second.ids == first.ids
    assert second.record_id is None
    assert list(repo.export("ns")) == exported
    assert len(repo.records("ns")) == 1


def test_add_memories_out_of_order_links_timeline_by_event_time(repo: Repository) -> None:
    days = list(range(12))
    random.Random(7).shuffle(days)
    for day in days:
        repo.add_memories("ns", [mem(f"event on day {day}", NOW + day * DAY)], now=NOW)
    order = timeline(repo, "ns")
    with repo.reading() as session:
        contents = [session.get(Memory, i).content for i in order]  # type: ignore[union-attr]
    assert contents == [f"event on day {d}" for d in range(12)]


def test_add_memories_equal_times_keep_arrival_order(repo: Repository) -> None:
    result = repo.add_memories("ns", [mem(f"turn {i}", NOW) for i in range(5)], now=NOW)
    assert timeline(repo, "ns") == list(result.ids)


def test_add_memories_timelines_are_per_namespace(repo: Repository) -> None:
    repo.add_memories("a", [mem("a1", NOW), mem("a2", NOW + DAY)], now=NOW)
    repo.add_memories("b", [mem("b1", NOW + DAY / 2)], now=NOW)
    assert len(timeline(repo, "a")) == 2
    assert len(timeline(repo, "b")) == 1


def test_add_memories_failure_mid_batch_writes_nothing(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo.add_memories("ns", [mem("before", NOW)], now=NOW)
    before = list(repo.export("ns"))
    link = Repository.link_into_timeline
    calls = []

    def link_then_fail(*args: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("crash after the first item of the batch was written")
        link(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(Repository, "link_into_timeline", staticmethod(link_then_fail))
    with pytest.raises(RuntimeError, match="crash"):
        repo.add_memories("ns", [mem("fine", NOW + DAY), mem("also", NOW + 2 * DAY)], now=NOW)
    assert list(repo.export("ns")) == before
    assert repo.outbox_size() == 1
    assert len(repo.records("ns")) == 1


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
    assert "unknown field" in problems[2][1]
    assert "max_content_chars" in problems[4][1]


def test_add_memories_writes_record_with_images_and_outbox(repo: Repository) -> None:
    first = repo.add_memories("ns", [mem("one", NOW)], now=NOW)
    second = repo.add_memories("ns", [mem("zero", NOW - DAY)], now=NOW)
    record, operations = repo.record(second.record_id)  # type: ignore[arg-type]
    assert record.job == "ingest"
    assert record.status == "applied"
    kinds = [(op.op, op.target_id) for op in operations]
    assert kinds == [("create_memory", second.ids[0]), ("update_memory", first.ids[0])]
    update = operations[1]
    assert update.before is not None
    assert update.after is not None
    assert update.before["prev_id"] is None
    assert update.after["prev_id"] == second.ids[0]
    with repo.reading() as session:
        outbox = session.scalars(select(IndexOutbox.memory_id).order_by(IndexOutbox.id)).all()
    # A link change is not content: only the new memory goes to the vector index.
    assert outbox == [first.ids[0], second.ids[0]]


def test_set_status_bumps_version_and_queues_delete(repo: Repository) -> None:
    result = repo.add_memories("ns", [mem("stale fact", NOW)], now=NOW)
    revision = repo.revision("ns")
    repo.set_status("ns", list(result.ids), MemoryStatus.ARCHIVED, now=NOW, job="test")
    memory = repo.get_memory("ns", result.ids[0])
    assert memory is not None
    assert memory.status == "archived"
    assert memory.version == 2
    assert repo.revision("ns") == revision + 1
    assert repo.active_memories("ns", result.ids) == {}
    actions = [entry.action for entry in repo.outbox(limit=10)]
    assert actions == ["upsert", "delete"]


def test_reinforce_counts_and_bounds_base_importance(repo: Repository) -> None:
    result = repo.add_memories("ns", [mem("a", NOW, importance=9), mem("b", NOW)], now=NOW)
    a, b = result.ids
    later = NOW + DAY
    repo.reinforce({a: 30, b: 1}, now=later, step=0.1, max_boost=2.0)
    memory_a, memory_b = repo.get_memory("ns", a), repo.get_memory("ns", b)
    assert memory_a is not None
    assert memory_b is not None
    assert memory_a.access_count == 30
    assert memory_a.base_importance == pytest.approx(10.0)  # capped at 10
    assert memory_b.base_importance == pytest.approx(5.1)
    assert memory_b.last_accessed == later
    assert memory_b.version == 1  # recall is not a content change


def test_export_is_deterministic_and_restores_into_empty_store(
    repo: Repository, tmp_path: object
) -> None:
    repo.add_memories(
        "ns",
        [mem("a", NOW, tags=["x"], metadata={"k": "v"}), mem("b", NOW + DAY, session_id="s1")],
        now=NOW,
    )
    ids = repo.add_memories("ns", [mem("c", NOW - DAY)], now=NOW).ids
    repo.add_relation("ns", 1, ids[0], "causal", strength=0.7, now=NOW, job="test")
    repo.set_status("ns", [2], MemoryStatus.SUPERSEDED, now=NOW, job="test")
    exported = list(repo.export("ns"))
    assert exported == list(repo.export("ns"))
    assert {json.loads(line)["kind"] for line in exported} == {"memory", "relation"}
    # Restoring an export over itself is a no-op.
    repo.restore("ns", [json.loads(line) for line in exported], now=NOW)
    assert list(repo.export("ns")) == exported


def test_restore_into_fresh_database_reproduces_export(
    repo: Repository, sqlite_repo: Repository
) -> None:
    repo.add_memories("ns", [mem("a", NOW), mem("b", NOW + DAY), mem("c", NOW - DAY)], now=NOW)
    repo.add_relation("ns", 1, 3, "thematic", strength=0.3, now=NOW, job="test")
    exported = list(repo.export("ns"))
    sqlite_repo.restore("ns", [json.loads(line) for line in exported], now=NOW)
    assert list(sqlite_repo.export("ns")) == exported


def test_restore_other_namespace_rejected(repo: Repository) -> None:
    repo.add_memories("a", [mem("x", NOW)], now=NOW)
    lines = [json.loads(line) for line in repo.export("a")]
    with pytest.raises(ValidationFailed, match="namespace"):
        repo.restore("b", lines, now=NOW)


def test_add_logs_idempotent_by_key(repo: Repository) -> None:
    logs = [
        LogIn(session_id="s", role="user", content="hi", timestamp=NOW),
        LogIn(
            session_id="s", role="assistant", content="hello", timestamp=NOW, idempotency_key="k2"
        ),
    ]
    first = repo.add_logs("ns", logs, now=NOW)
    second = repo.add_logs("ns", logs, now=NOW)
    assert len(first.created) == 2
    assert second.created == ()
    assert second.ids == first.ids


def test_memory_history_lists_touching_records(repo: Repository) -> None:
    first = repo.add_memories("ns", [mem("a", NOW)], now=NOW)
    repo.add_memories("ns", [mem("b", NOW + DAY)], now=NOW)
    archive = repo.set_status("ns", list(first.ids), MemoryStatus.ARCHIVED, now=NOW, job="test")
    history = repo.memory_history("ns", first.ids[0])
    assert [r.id for r in history] == [first.record_id, first.record_id + 1, archive]  # type: ignore[operator]
    assert repo.memory_history("other", first.ids[0]) == []


def test_changing_without_changes_leaves_no_record(repo: Repository) -> None:
    with repo.changing("ns", "noop", NOW):
        pass
    with repo.reading() as session:
        assert session.scalar(select(func.count()).select_from(MaintenanceRecord)) == 0


def test_llm_tokens_counted_per_day_and_kept_a_week(repo: Repository) -> None:
    from secretary.budget import Budget, StoreUsageLedger
    from secretary.errors import BudgetExhausted

    ledger = StoreUsageLedger(repo, clock=lambda: NOW)
    for offset in range(9):
        ledger.add("ns", (NOW + offset * DAY).date(), 100 + offset)
    ledger.add("ns", NOW.date() + 8 * DAY, 1)
    assert ledger.used_today("ns", (NOW + 8 * DAY).date()) == 109
    assert ledger.used_today("ns", NOW.date()) == 0  # older than a week: dropped
    assert ledger.used_today("other", (NOW + 8 * DAY).date()) == 0
    budget = Budget(namespace="ns", now=NOW + 8 * DAY, max_tokens_per_day=150, ledger=ledger)
    with pytest.raises(BudgetExhausted):
        budget.ensure_affordable(50)
