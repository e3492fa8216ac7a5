"""auditor: a backlog of exact copies, recalled or not, is merged in one run, and undone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select

from store.db import session_factory
from store.images import memory_image
from store.models import Memory
from store.write.undo import undo
from tests.secretary.jobs.conftest import DAY, NOW, World

MINUTE = timedelta(minutes=1)
TURNS = 30


def polluted(world: World) -> tuple[list[int], list[int]]:
    """A session of turns, then an exact copy of each a few minutes later (same session)."""
    start = NOW - DAY
    turns = world.add(
        [
            {
                "content": f"Turn {n}: Maya talks about topic {n}.",
                "type": "event",
                "session_id": "s1",
                "timestamp": start + n * MINUTE,
            }
            for n in range(TURNS)
        ]
    )
    copies = world.add(
        [
            {
                "content": f"Turn {n}: Maya talks about topic {n}.",
                "type": "event",
                "session_id": "s1",
                "timestamp": start + (n + 5) * MINUTE,
            }
            for n in range(TURNS)
        ]
    )
    return list(turns), list(copies)


def rows(world: World) -> dict[int, dict[str, Any]]:
    """Every memory of the namespace as its stored image."""
    with session_factory(world.store.engine)() as session:
        return {m.id: memory_image(m) for m in session.scalars(select(Memory))}


def test_auditor_merges_every_exact_copy_in_one_run_searched_or_not(world: World) -> None:
    # Reads of 8 memories, records of at most 5 merges: the backlog takes several of each.
    world.configure(llm=False, jobs={"max_items_per_run": 8}, guardrails={"max_changes_per_run": 5})
    turns, copies = polluted(world)
    recalled = copies[::3]  # searched since: recently recalled, which protected them before
    world.store.db.writer.reinforce(
        dict.fromkeys(recalled, 2), now=NOW - MINUTE, step=0.1, max_boost=2.0
    )

    outcome = world.run("auditor")

    assert outcome.status == "applied"
    assert world.llm_requests == []
    assert [m.id for m in world.active()] == turns  # 100% of the copies merged
    assert all(world.memory(c).replaced_by_id == t for t, c in zip(turns, copies, strict=True))
    assert outcome.stats["exact_duplicates"] == TURNS
    assert outcome.stats["protected_ids"] == []
    assert len(outcome.records) >= TURNS // 5  # bounded transactions, one record each
    assert f"{TURNS} changes applied in {len(outcome.records)} records" in outcome.message
    for turn, copy in zip(turns, copies, strict=True):
        keeper = world.memory(turn)
        if copy in recalled:
            assert (keeper.access_count, keeper.last_accessed) == (2, NOW - MINUTE)
            assert keeper.base_importance == world.memory(copy).base_importance
        else:
            assert (keeper.access_count, keeper.last_accessed) == (0, None)
    state = world.store.db.work.job_state("auditor", "maya")
    assert state["exact_watermark"] > max(turns)  # past every turn (merged copies are not read)

    again = world.run("auditor", now=NOW + MINUTE)

    assert again.status in ("nothing", "skipped")
    assert [m.id for m in world.active()] == turns


def test_auditor_backlog_dry_run_plans_every_copy_once(world: World) -> None:
    world.configure(llm=False, jobs={"max_items_per_run": 8}, guardrails={"max_changes_per_run": 5})
    polluted(world)

    outcome = world.run("auditor", dry_run=True)

    assert outcome.stats["exact_duplicates"] == TURNS
    assert len(world.active()) == 2 * TURNS  # nothing written
    assert [r for r in world.records() if r.job == "auditor"] == []


def test_auditor_backlog_run_is_undone_record_by_record(world: World) -> None:
    world.configure(llm=False, jobs={"max_items_per_run": 8}, guardrails={"max_changes_per_run": 5})
    _, copies = polluted(world)
    world.store.db.writer.reinforce(
        dict.fromkeys(copies[::2], 1), now=NOW - MINUTE, step=0.1, max_boost=2.0
    )
    before = rows(world)

    outcome = world.run("auditor")
    for record_id in reversed(outcome.records):
        undo(world.store.db.writer, record_id, now=NOW + DAY)

    assert rows(world) == before
