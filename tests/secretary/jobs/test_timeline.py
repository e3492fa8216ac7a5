"""Retired memories leave the timeline, for every job, and undo puts the links back exactly.

Spreading activation walks prev/next: an active memory pointing at a merged, superseded or
archived one would stop there, so whatever retires a memory joins its neighbours instead.
"""

from __future__ import annotations

from datetime import timedelta

from store.kinds import MemoryStatus
from store.views import MemoryView
from store.write.undo import undo
from tests.secretary.jobs.conftest import DAY, HOUR, NOW, World
from tests.secretary.jobs.test_auditor import paris_and_lyon, verdict
from tests.secretary.jobs.test_soul_mapper import runs, trait

MINUTE = timedelta(minutes=1)


def everything(world: World) -> list[MemoryView]:
    return world.store.db.memories.many("maya", range(1, 10_000))


def assert_timeline_holds_only_active_memories(world: World) -> None:
    rows = {m.id: m for m in everything(world)}
    active = sorted(
        (m for m in rows.values() if m.status == "active"), key=lambda m: (m.event_time, m.id)
    )
    for memory in rows.values():
        if memory.status != "active":
            assert (memory.prev_id, memory.next_id) == (None, None), memory
    # The active memories form one chain in time order.
    chain = [(m.prev_id, m.id, m.next_id) for m in active]
    expected = [
        (active[i - 1].id if i else None, m.id, active[i + 1].id if i + 1 < len(active) else None)
        for i, m in enumerate(active)
    ]
    assert chain == expected


def export(world: World) -> list[str]:
    return list(world.store.db.memories.export("maya"))


def test_auditor_supersede_and_archive_join_the_neighbours(world: World) -> None:
    old, new = paris_and_lyon(world)
    world.add(
        [
            {"content": "Maya bought bread.", "timestamp": NOW - 8 * DAY},
            {"content": "Maya fed the cat.", "timestamp": NOW - 2 * DAY},
        ]
    )
    before = export(world)
    world.reply({"verdicts": [verdict(old, "supersede", superseded_by=new), verdict(new, "keep")]})

    world.run("auditor")

    assert world.memory(old).status == "superseded"
    assert_timeline_holds_only_active_memories(world)
    (judged,) = [r for r in world.records() if r.job == "auditor"]
    undo(world.store.db.writer, judged.id, now=NOW + HOUR)
    assert export(world) == before


def test_exact_duplicate_merge_leaves_the_timeline_and_undo_restores_it(world: World) -> None:
    world.configure(llm=False)
    world.add(
        [
            {"content": "Maya bought bread.", "timestamp": NOW - 3 * DAY},
            {"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "a",
             "timestamp": NOW - 2 * DAY},
            {"content": "Maya fed the cat.", "timestamp": NOW - DAY},
            {"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "b",
             "timestamp": NOW - HOUR},
        ]
    )  # fmt: skip
    before = export(world)

    outcome = world.run("auditor")

    assert outcome.stats["exact_duplicates"] == 1
    assert_timeline_holds_only_active_memories(world)
    undo(world.store.db.writer, outcome.record_id or 0, now=NOW + HOUR)
    assert export(world) == before


def test_revised_trait_leaves_the_timeline(world: World) -> None:
    first, _second = runs(world)
    world.reply({"traits": [trait("The user runs.", [first])]})
    world.run("soul_mapper")
    (trait_id,) = [m.id for m in world.active() if m.metadata.get("trait") is True]
    (third,) = world.memories(content="Maya ran a half marathon.", timestamp=NOW - HOUR)
    world.reply({"traits": [trait("The user races.", [third], updates=trait_id)]})

    world.run("soul_mapper", now=NOW + HOUR)

    assert world.memory(trait_id).status == "superseded"
    assert_timeline_holds_only_active_memories(world)


def test_reactivating_a_memory_puts_it_back_in_its_place(world: World) -> None:
    ids = world.add(
        [{"content": f"event {n}", "timestamp": NOW - (5 - n) * HOUR} for n in range(5)]
    )
    world.set_status(ids[2], MemoryStatus.ARCHIVED)
    assert_timeline_holds_only_active_memories(world)

    world.set_status(ids[2], MemoryStatus.ACTIVE)

    assert_timeline_holds_only_active_memories(world)
    assert (world.memory(ids[2]).prev_id, world.memory(ids[2]).next_id) == (ids[1], ids[3])


def test_ingesting_beside_a_retired_memory_links_to_active_neighbours_only(world: World) -> None:
    ids = world.add(
        [{"content": f"event {n}", "timestamp": NOW - (5 - n) * HOUR} for n in range(3)]
    )
    world.set_status(ids[1], MemoryStatus.ARCHIVED)

    (new,) = world.memories(content="between", timestamp=NOW - 4 * HOUR + MINUTE)

    assert_timeline_holds_only_active_memories(world)
    assert (world.memory(new).prev_id, world.memory(new).next_id) == (ids[0], ids[2])


def test_supersede_puts_the_replacement_in_the_old_memory_context(world: World) -> None:
    # Next to Paris on the timeline: the bread, said in the same conversation, and the cat,
    # said minutes later in another one (a session boundary: they do not belong together).
    old, new = paris_and_lyon(world, session_id="s1")
    bread, cat = world.add(
        [
            {"content": "Maya bought bread.", "session_id": "s1",
             "timestamp": NOW - 9 * DAY - 5 * MINUTE},
            {"content": "Maya fed the cat.", "session_id": "s2",
             "timestamp": NOW - 9 * DAY + 2 * MINUTE},
        ]
    )  # fmt: skip
    assert (world.memory(old).prev_id, world.memory(old).next_id) == (bread, cat)
    before = export(world)
    world.reply({"verdicts": [verdict(old, "supersede", superseded_by=new), verdict(new, "keep")]})

    outcome = world.run("auditor")

    assert world.memory(old).status == "superseded"
    assert world.edges(new) == {(new, bread, "temporal")}
    undo(world.store.db.writer, outcome.record_id or 0, now=NOW + HOUR)
    assert export(world) == before
    assert world.edges(new) == set()
