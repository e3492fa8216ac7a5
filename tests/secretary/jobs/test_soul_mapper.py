"""soul_mapper: events and facts -> traits with confidence and evidence links."""

from __future__ import annotations

from typing import Any

from tests.secretary.jobs.conftest import DAY, NOW, World


def trait(
    text: str, evidence: list[int], updates: int | None = None, confidence: float = 0.7
) -> dict[str, Any]:
    return {
        "trait": text,
        "confidence": confidence,
        "evidence_ids": evidence,
        "updates_trait_id": updates,
    }


def runs(world: World) -> tuple[int, int]:
    first, second = world.add(
        [
            {"content": "Maya ran 10 km before work.", "timestamp": NOW - 3 * DAY},
            {
                "content": "Maya signed up for a half marathon.",
                "type": "fact",
                "timestamp": NOW - DAY,
            },
        ]
    )
    return first, second


def test_soul_mapper_events_create_trait_with_evidence_links(world: World) -> None:
    first, second = runs(world)
    world.reply({"traits": [trait("The user is a keen runner.", [first, second, 555])]})

    outcome = world.run("soul_mapper")

    assert outcome.status == "applied"
    (made,) = [m for m in world.active() if m.metadata.get("trait") is True]
    assert made.type == "preference"
    assert made.metadata["confidence"] == 0.7
    assert made.event_time == NOW - DAY  # its latest evidence, not "now"
    assert world.edges(made.id) == {
        (made.id, first, "derived_from"),
        (made.id, second, "derived_from"),
    }
    assert outcome.stats["dropped_ids"] == [555]
    assert world.run("soul_mapper").status == "nothing"
    assert len(world.llm_requests) == 1


def test_soul_mapper_updated_trait_supersedes_previous_version(world: World) -> None:
    (old,) = world.memories(
        content="The user runs now and then.",
        type="preference",
        metadata={"trait": True, "confidence": 0.4},
        timestamp=NOW - 30 * DAY,
    )
    _, second = runs(world)
    world.reply(
        {"traits": [trait("The user trains for races.", [second], updates=old, confidence=0.8)]}
    )

    outcome = world.run("soul_mapper")

    assert outcome.status == "applied"
    previous = world.memory(old)
    assert previous.status == "superseded"
    revised = world.memory(previous.replaced_by_id or 0)
    assert revised.content == "The user trains for races."
    assert revised.metadata == {
        "trait": True,
        "confidence": 0.8,
        "evidence_ids": [second],
        "previous_trait_id": old,
    }
    sent = world.llm_requests[0]["messages"][-1]["content"]
    assert "runs now and then" in sent.split("<traits>")[1].split("</traits>")[0]


def test_soul_mapper_reply_naming_a_shown_trait_and_unsent_evidence_is_used(
    world: World,
) -> None:
    """The traits a prompt shows are ids it sent: a reply revising one is no reply that names
    only what was never sent, even with invented evidence (dropped one by one)."""
    (old,) = world.memories(
        content="The user runs now and then.",
        type="preference",
        metadata={"trait": True, "confidence": 0.4},
        timestamp=NOW - 30 * DAY,
    )
    runs(world)
    world.reply({"traits": [trait("The user trains for races.", [9090], updates=old)]})

    outcome = world.run("soul_mapper")

    assert len(world.llm_requests) == 1  # not sent back for repair
    assert outcome.stats["dropped_ids"] == [9090]


def test_soul_mapper_unknown_trait_to_update_is_dropped(world: World) -> None:
    first, _ = runs(world)
    world.reply({"traits": [trait("The user is a runner.", [first], updates=first)]})

    outcome = world.run("soul_mapper")

    assert outcome.status == "nothing"  # memory `first` is evidence, not a trait it may revise
    assert outcome.stats["dropped_ids"] == [first]
    assert world.memory(first).status == "active"


def test_soul_mapper_trait_proposed_again_without_saying_it_revises_is_dropped(
    world: World,
) -> None:
    (old,) = world.memories(
        content="The user is a keen runner.",
        type="preference",
        metadata={"trait": True, "confidence": 0.6},
        timestamp=NOW - 30 * DAY,
    )
    first, second = runs(world)
    world.reply(
        {
            "traits": [
                trait("The user is a keen runner.", [first]),  # trait #old again, as new
                trait("The user signs up for races.", [first]),
                trait(" The user signs up for races.", [second]),  # twice in one reply
            ]
        }
    )

    outcome = world.run("soul_mapper")

    traits = [m for m in world.active() if m.metadata.get("trait") is True]
    assert sorted(m.content for m in traits) == [
        "The user is a keen runner.",
        "The user signs up for races.",
    ]
    assert world.memory(old).status == "active"
    assert [d["reason"] for d in outcome.stats["dropped"]] == [
        f"says what trait #{old} says already",
        "says what a trait made this run says already",
    ]


def test_soul_mapper_prompt_shows_memories_by_day_and_traits_since_a_day(world: World) -> None:
    first, second = runs(world)
    world.reply({"traits": [trait("The user is a keen runner.", [first, second])]})
    world.run("soul_mapper")
    (made,) = [m for m in world.active() if m.metadata.get("trait") is True]
    (third,) = world.memories(content="Maya ran 12 km on Sunday.", timestamp=NOW - DAY)
    world.reply({"traits": []})

    world.run("soul_mapper", now=NOW + DAY)

    sent = world.sent()
    assert sent["traits"] == [
        {
            "id": made.id,
            "trait": "The user is a keen runner.",
            "confidence": 0.7,
            "since": (NOW - DAY).strftime("%Y-%m-%d"),
        }
    ]
    assert sent["memories"] == [
        {
            "id": third,
            "type": "event",
            "day": (NOW - DAY).strftime("%Y-%m-%d"),
            "content": "Maya ran 12 km on Sunday.",
        }
    ]
