"""The Reinforcer: recalls are counted in memory and written in batches, never lost on a failure."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta

import pytest
from loguru import logger
from sqlalchemy.exc import OperationalError

from store.database import Database
from store.schemas import MemoryIn
from store.settings import ReinforcementSettings
from store.views import MemoryView
from store.write.reinforcement import Reinforcer, merge_counts
from store.write.writer import Writer

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
SETTINGS = ReinforcementSettings(flush_seconds=60.0, importance_step=0.1, max_boost=2.0)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """Loguru warnings emitted during the test."""
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m.record["message"])), level="WARNING")
    yield messages
    logger.remove(sink)


def add(db: Database, *contents: str) -> tuple[int, ...]:
    items = [MemoryIn.model_validate({"content": c, "timestamp": NOW}) for c in contents]
    return db.writer.add_memories("ns", items, now=NOW).ids


def get(db: Database, memory_id: int) -> MemoryView:
    memory = db.memories.get("ns", memory_id)
    assert memory is not None
    return memory


class FlakyWriter(Writer):
    """Fails the first ``failures`` reinforce calls as if the database were locked."""

    def __init__(self, db: Database, failures: int) -> None:
        super().__init__(db.engine)
        self.failures = failures
        self.calls = 0
        self.flushed = threading.Event()

    def reinforce(
        self, counts: Mapping[int, int], *, now: datetime, step: float, max_boost: float
    ) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError("UPDATE memories", {}, Exception("database is locked"))
        super().reinforce(counts, now=now, step=step, max_boost=max_boost)
        self.flushed.set()


def test_merge_counts_full_map_drops_only_new_ids() -> None:
    pending = {1: 1, 2: 1}
    dropped = merge_counts(pending, {1: 2, 3: 1, 4: 1}, cap=2)
    assert dropped == 2
    assert pending == {1: 3, 2: 1}


def test_record_without_flush_writes_nothing(sqlite_db: Database) -> None:
    (memory_id,) = add(sqlite_db, "a")
    reinforcer = Reinforcer(sqlite_db.writer, SETTINGS)
    reinforcer.record([memory_id], NOW)
    assert reinforcer.pending == 1
    assert get(sqlite_db, memory_id).access_count == 0


def test_flush_repeated_recalls_counts_each_and_nudges_importance(
    sqlite_db: Database,
) -> None:
    a, b = add(sqlite_db, "a", "b")
    reinforcer = Reinforcer(sqlite_db.writer, SETTINGS)
    reinforcer.record([a, b], NOW)
    reinforcer.record([a], NOW + timedelta(hours=1))
    assert reinforcer.flush() == 2
    assert reinforcer.pending == 0
    memory_a, memory_b = get(sqlite_db, a), get(sqlite_db, b)
    assert memory_a.access_count == 2
    assert memory_a.base_importance == pytest.approx(5.2)
    assert memory_a.last_accessed == NOW + timedelta(hours=1)  # the latest recall
    assert memory_b.access_count == 1
    assert memory_a.version == 1


def test_flush_nothing_pending_returns_zero(sqlite_db: Database) -> None:
    assert Reinforcer(sqlite_db.writer, SETTINGS).flush() == 0


def test_flush_database_error_keeps_counts_for_next_try(
    sqlite_db: Database, warnings: list[str]
) -> None:
    (memory_id,) = add(sqlite_db, "a")
    flaky = FlakyWriter(sqlite_db, failures=1)
    reinforcer = Reinforcer(flaky, SETTINGS)
    reinforcer.record([memory_id], NOW)
    assert reinforcer.flush() == 0
    assert any("failed" in message for message in warnings)
    reinforcer.record([memory_id], NOW)  # recalls during the outage add up
    assert reinforcer.flush() == 1
    assert get(sqlite_db, memory_id).access_count == 2


def test_record_full_queue_drops_new_ids_with_warning(
    sqlite_db: Database, warnings: list[str]
) -> None:
    a, b, c = add(sqlite_db, "a", "b", "c")
    reinforcer = Reinforcer(sqlite_db.writer, SETTINGS, max_pending=2)
    reinforcer.record([a, b], NOW)
    reinforcer.record([c, a], NOW)
    assert reinforcer.pending == 2
    assert any("full" in message for message in warnings)
    reinforcer.flush()
    assert [get(sqlite_db, i).access_count for i in (a, b, c)] == [2, 1, 0]


def test_close_without_thread_flushes_pending(sqlite_db: Database) -> None:
    (memory_id,) = add(sqlite_db, "a")
    reinforcer = Reinforcer(sqlite_db.writer, SETTINGS)
    reinforcer.record([memory_id], NOW)
    reinforcer.close()
    assert get(sqlite_db, memory_id).access_count == 1


def test_background_thread_flushes_periodically_and_close_stops_it(
    sqlite_db: Database,
) -> None:
    (memory_id,) = add(sqlite_db, "a")
    flaky = FlakyWriter(sqlite_db, failures=0)
    reinforcer = Reinforcer(flaky, ReinforcementSettings(flush_seconds=0.01))
    reinforcer.start()
    try:
        reinforcer.record([memory_id], NOW)
        # Waits for the thread's signal, not for a duration: the test does not depend on timing.
        assert flaky.flushed.wait(10)
    finally:
        reinforcer.close()
    assert not any(t.name == "reinforcer" for t in threading.enumerate())
    assert get(sqlite_db, memory_id).access_count == 1


def test_record_from_many_threads_counts_every_recall(sqlite_db: Database) -> None:
    (memory_id,) = add(sqlite_db, "a")
    reinforcer = Reinforcer(sqlite_db.writer, SETTINGS)

    def recall() -> None:
        for _ in range(100):
            reinforcer.record([memory_id], NOW)

    threads = [threading.Thread(target=recall) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reinforcer.flush()
    assert get(sqlite_db, memory_id).access_count == 800
