"""retention: tombstones older than the undo window are purged; records stay."""

from __future__ import annotations

from datetime import datetime

from store.kinds import MemoryStatus
from store.operations import SetStatus
from tests.secretary.jobs.conftest import DAY, NOW, World


def set_status_at(world: World, memory_id: int, status: MemoryStatus, now: datetime) -> None:
    """Change a memory's status through the one writer at a given time (its tombstone age)."""
    op = SetStatus(memory_id=memory_id, status=status)
    world.store.db.writer.apply("maya", "test", [op], now=now)


def test_retention_purges_tombstones_older_than_undo_window(world: World) -> None:
    old, recent, alive = world.add(
        [{"content": "old news"}, {"content": "recent news"}, {"content": "kept"}],
        now=NOW - 60 * DAY,
    )
    set_status_at(world, old, MemoryStatus.ARCHIVED, NOW - 40 * DAY)
    set_status_at(world, recent, MemoryStatus.SUPERSEDED, NOW - 5 * DAY)
    records_before = len(world.records())

    outcome = world.run("retention")

    assert outcome.status == "applied"
    assert outcome.stats["purged"] == 1
    assert world.store.db.memories.get("maya", old) is None
    assert world.memory(recent).status == "superseded"
    assert world.memory(alive).status == "active"
    assert len(world.records()) == records_before + 1  # earlier records are kept
    assert world.llm_requests == []
    assert world.run("retention").status == "nothing"


def test_retention_undo_window_is_configurable(world: World) -> None:
    world.configure(jobs={"retention_undo_days": 3})
    (gone,) = world.memories(content="superseded long enough")
    set_status_at(world, gone, MemoryStatus.MERGED, NOW - 4 * DAY)

    assert world.run("retention").status == "applied"
    assert world.store.db.memories.get("maya", gone) is None
