"""Guardrails: protected memories, the per-run change cap and ids from replies."""

from __future__ import annotations

from datetime import timedelta

from secretary.jobs.base import split_ids
from secretary.jobs.guardrails import (
    ChangeCount,
    ProtectionFacts,
    cap_refusal,
    count_changes,
    drop_protected,
    overtaken,
    protected_ids,
)
from secretary.jobs.settings import GuardrailSettings
from store.kinds import MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from tests.secretary.jobs.conftest import DAY, NOW, World
from tests.secretary.jobs.test_auditor import paris_and_lyon, verdict


def facts(memory_id: int, **values: object) -> ProtectionFacts:
    base: dict[str, object] = {"pinned": False, "importance": 5, "last_accessed": None}
    return ProtectionFacts(id=memory_id, **(base | values))  # type: ignore[arg-type]


def test_protected_ids_pinned_important_or_recently_recalled() -> None:
    settings = GuardrailSettings(protect_importance=9, protect_accessed_days=7)
    memories = [
        facts(1, pinned=True),
        facts(2, importance=9),
        facts(3, last_accessed=NOW - 2 * DAY),
        facts(4, last_accessed=NOW - 30 * DAY),
        facts(5),
    ]

    assert protected_ids(memories, settings, now=NOW) == {1, 2, 3}
    allowed = settings.model_copy(update={"allow_protected_changes": True})
    assert protected_ids(memories, allowed, now=NOW) == set()


def test_drop_protected_drops_whole_changes_that_retire_or_rewrite_them() -> None:
    merge: list[Operation] = [
        UpdateMemory(memory_id=1, changes={"content": "x"}),
        SetStatus(memory_id=2, status=MemoryStatus.MERGED, replaced_by=1),
    ]
    summary: list[Operation] = [
        CreateMemory(
            key="s",
            content="s",
            type="interaction_summary",
            event_time=NOW,
            replaces_in_timeline=(3, 4),
        ),
    ]
    relate: list[Operation] = [CreateRelation(source=1, target=3, type="associative", strength=0.5)]

    filtered = drop_protected([merge, summary, relate], {1, 4})

    assert filtered.kept == (2,)  # relating a protected memory changes nothing about it
    assert filtered.dropped == (0, 1)
    assert filtered.protected_hit == (1, 4)


def test_cap_refusal_absolute_and_share_of_active() -> None:
    settings = GuardrailSettings(
        max_changes_per_run=10, max_change_share=0.25, change_share_floor=2
    )

    assert cap_refusal(ChangeCount(existing=11, purged=0), 1000, settings) is not None
    assert cap_refusal(ChangeCount(existing=3, purged=8), 1000, settings) is not None
    assert cap_refusal(ChangeCount(existing=2, purged=0), 4, settings) is None  # the floor
    assert cap_refusal(ChangeCount(existing=3, purged=0), 8, settings) is not None
    assert cap_refusal(ChangeCount(existing=3, purged=0), 12, settings) is None
    assert cap_refusal(ChangeCount(existing=0, purged=5), 0, settings) is None


def test_count_changes_ignores_creations() -> None:
    ops: list[Operation] = [
        CreateMemory(key="k", content="c", type="fact", event_time=NOW),
        CreateRelation(source="k", target=1, type="derived_from", strength=1.0),
        SetStatus(memory_id=1, status=MemoryStatus.SUPERSEDED, replaced_by="k"),
        SetStatus(memory_id=9, status=MemoryStatus.ACTIVE),
        Purge(memory_id=7),
    ]

    assert count_changes(ops) == ChangeCount(existing=1, purged=1)


def test_overtaken_names_a_memory_retired_or_changed_since_it_was_read() -> None:
    merge = [SetStatus(memory_id=1, status=MemoryStatus.MERGED, replaced_by=2)]
    link = [CreateRelation(source=7, target=8, type="thematic", strength=0.5)]
    current = {
        1: ("active", 3),
        2: ("active", 5),
        7: ("deleted", 1),
        8: ("active", 1),
        9: ("archived", 2),
    }

    found = overtaken(
        [
            (merge, {1: 3, 2: 5}),  # as read: stands
            (merge, {1: 3, 2: 4}),  # #2 edited since
            (link, {}),  # #7 deleted since
            ([Purge(memory_id=9)], {}),  # a purge names a tombstone on purpose
        ],
        current,
    )

    assert found == {
        1: "#2 changed since the run read it",
        2: "names #7 (deleted), no longer active since the run read it",
    }


def test_split_ids_separates_ids_that_were_not_sent() -> None:
    assert split_ids([1, 2, 99, 2], {1, 2, 3}) == ({1, 2}, {99})


def test_run_job_protected_memory_is_not_superseded(world: World) -> None:
    old, new = paris_and_lyon(world, pinned=True)
    world.reply({"verdicts": [verdict(old, "supersede", superseded_by=new), verdict(new)]})

    outcome = world.run("auditor")

    assert world.memory(old).status == "active"
    assert outcome.stats["dropped_protected"] == 1
    assert outcome.stats["protected_ids"] == [old]


def test_drop_protected_lossless_change_is_held_back_by_a_pinned_memory_only() -> None:
    merge = [SetStatus(memory_id=2, status=MemoryStatus.MERGED, replaced_by=1)]

    recalled = drop_protected([merge], {2}, lossless={0}, pinned=())
    pinned = drop_protected([merge], {2}, lossless={0}, pinned={2})
    judged = drop_protected([merge], {2})

    assert (recalled.kept, pinned.dropped, judged.dropped) == ((0,), (0,), (0,))


def test_run_job_recently_recalled_duplicate_is_merged_keeping_its_recalls(world: World) -> None:
    (first,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="a"
    )
    (twin,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="b"
    )
    world.store.db.writer.reinforce({twin: 3}, now=NOW - DAY, step=0.1, max_boost=1.0)

    outcome = world.run("auditor")

    assert [m.id for m in world.active()] == [first]
    assert world.memory(twin).replaced_by_id == first
    keeper = world.memory(first)
    assert (keeper.access_count, keeper.last_accessed) == (3, NOW - DAY)
    assert keeper.base_importance == world.memory(twin).base_importance
    assert outcome.stats["protected_ids"] == []


def test_run_job_pinned_duplicate_is_kept_and_the_message_says_so(world: World) -> None:
    world.configure(llm=False)
    (first,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="a", pinned=True
    )
    (second,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="b", pinned=True
    )
    (third,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="c"
    )

    outcome = world.run("auditor")

    assert [m.id for m in world.active()] == [first, second]
    assert world.memory(third).replaced_by_id == first  # a pinned copy is the keeper
    assert "1 exact duplicate left as they are: pinned" in outcome.message
    assert outcome.stats["exact_duplicates_pinned"] == [second]


def three_archived(world: World, replies: int = 1) -> list[int]:
    """Three unrelated facts, and a model that archives all of them (an LLM-judged plan)."""
    world.configure(jobs={"auditor_near_threshold": 0.0})
    ids = [
        world.memories(content=text, type="fact", session_id=str(n))[0]
        for n, text in enumerate(["Maya owns a bike.", "Maya owns a car.", "Maya owns a boat."])
    ]
    for _ in range(replies):
        world.reply({"verdicts": [verdict(i, "archive") for i in ids]})
    return ids


def test_run_job_over_the_change_cap_is_refused_and_recorded(world: World) -> None:
    ids = three_archived(world)
    world.configure(guardrails={"max_changes_per_run": 2})

    outcome = world.run("auditor")

    assert outcome.status == "refused"
    assert "max_changes_per_run" in outcome.message
    assert [m.id for m in world.active()] == ids  # nothing applied
    (record,) = world.records()[-1:]
    assert record.status == "refused"
    assert "max_changes_per_run" in record.stats["refused"]


def test_run_job_over_the_share_of_active_memories_is_refused(world: World) -> None:
    ids = three_archived(world)
    world.configure(guardrails={"change_share_floor": 1, "max_change_share": 0.25})

    outcome = world.run("auditor")

    assert outcome.status == "refused"
    assert "3 of 3 active memories" in outcome.message
    assert [m.id for m in world.active()] == ids


def test_run_job_refusal_is_retried_within_limits_next_time(world: World) -> None:
    three_archived(world, replies=2)
    world.configure(guardrails={"max_changes_per_run": 1})
    assert world.run("auditor").status == "refused"

    world.configure(guardrails={"max_changes_per_run": 5})

    assert world.run("auditor", now=NOW + timedelta(minutes=1)).status == "applied"
    assert world.active() == []


def test_run_job_exact_duplicates_are_not_held_back_by_the_change_cap(world: World) -> None:
    world.configure(llm=False, guardrails={"max_changes_per_run": 3, "change_share_floor": 1})
    for session in "abcdefg":
        world.memories(content="The user is allergic to peanuts.", type="fact", session_id=session)

    outcome = world.run("auditor")

    assert outcome.status == "applied"
    assert len(world.active()) == 1
    assert len(outcome.records) == 2  # 6 merges, at most 3 a record
    assert "6 changes applied in 2 records" in outcome.message
