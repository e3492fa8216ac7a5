"""retention: tombstones older than the undo window are purged; records stay."""

from __future__ import annotations

from store.models import MemoryStatus
from tests.secretary.jobs.conftest import DAY, NOW, World


def test_retention_purges_tombstones_older_than_undo_window(world: World) -> None:
    old, recent, alive = world.add(
        [{"content": "old news"}, {"content": "recent news"}, {"content": "kept"}],
        now=NOW - 60 * DAY,
    )
    repo = world.store.repository
    repo.set_status("maya", [old], MemoryStatus.ARCHIVED, now=NOW - 40 * DAY, job="test")
    repo.set_status("maya", [recent], MemoryStatus.SUPERSEDED, now=NOW - 5 * DAY, job="test")
    records_before = len(world.records())

    outcome = world.run("retention")

    assert outcome.status == "applied"
    assert outcome.stats["purged"] == 1
    assert repo.get_memory("maya", old) is None
    assert world.memory(recent).status == "superseded"
    assert world.memory(alive).status == "active"
    assert len(world.records()) == records_before + 1  # earlier records are kept
    assert world.llm_requests == []
    assert world.run("retention").status == "nothing"


def test_retention_undo_window_is_configurable(world: World) -> None:
    world.configure(jobs={"retention_undo_days": 3})
    (gone,) = world.memories(content="superseded long enough")
    world.store.repository.set_status(
        "maya", [gone], MemoryStatus.MERGED, now=NOW - 4 * DAY, job="test"
    )

    assert world.run("retention").status == "applied"
    assert world.store.repository.get_memory("maya", gone) is None
