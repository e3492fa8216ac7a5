"""Replies as real models give them: valid items are applied, the others dropped with a reason.

Through litellm against the scripted server. Each reply honours the schema's types but breaks a
rule a schema cannot say (an edge from a memory to itself, a field filled that must be null, a
number out of range, an id that was not sent); the run applies exactly the valid items and its
record lists the rest, and the job moves on instead of failing forever.
"""

from __future__ import annotations

import json
from typing import Any

from store.exports.backup import export_store
from store.exports.lines import parse_export
from tests.secretary.jobs.conftest import DAY, HOUR, NOW, World
from tests.secretary.jobs.test_auditor import paris_and_lyon, verdict
from tests.secretary.jobs.test_extractor import lines, memory
from tests.secretary.jobs.test_soul_mapper import runs, trait


def reasons(world: World) -> list[str]:
    return [d["reason"] for r in world.records() for d in r.stats.get("dropped", [])]


def test_extractor_applies_valid_memories_and_records_the_invalid_one(world: World) -> None:
    log_ids = world.logs(lines())
    good = memory("The user adopted a cat named Miso.", log_ids[:2])
    two_tags = {**memory("The user wants answers in French.", [log_ids[2]]), "tags": ["a", "b"]}
    blank = {**memory(" ", [log_ids[0]])}  # blank content: no memory at all
    world.reply({"memories": [good, blank, two_tags]})

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    assert sorted(m.content for m in world.active()) == [
        "The user adopted a cat named Miso.",
        "The user wants answers in French.",
    ]
    (record,) = world.records()
    (dropped,) = record.stats["dropped"]
    assert dropped["item"] == "extractor reply item 1"
    assert "content" in dropped["reason"]
    assert world.store.db.work.job_state("extractor", "maya") == {"watermark": log_ids[-1]}
    assert len(world.llm_requests) == 1  # usable items: no repair round trip


def test_extractor_nul_characters_are_removed_and_said(world: World) -> None:
    log_ids = world.logs(lines())
    cat = {**memory("The user adopted a cat\x00 named Miso.", log_ids[:2]), "tags": ["c\x00at"]}
    world.reply({"memories": [cat, memory("\x00\x00", [log_ids[2]])]})

    world.run("extractor")

    (made,) = world.active()  # the item of NULs only is blank once they are removed: dropped
    assert (made.content, made.tags) == ("The user adopted a cat named Miso.", ("cat",))
    (record,) = world.records()
    assert "extractor: item 0: content: NUL characters removed" in record.stats["mended"]
    # What the store holds, an export of it restores (an export refuses a NUL).
    exported = [json.loads(line) for line in export_store(world.store.engine)]
    assert parse_export(exported, [str(n) for n in range(len(exported))])[1] == []


def test_extractor_choice_in_other_case_is_spelt_as_the_schema_does_and_said(
    world: World,
) -> None:
    log_ids = world.logs(lines())
    cat = memory("The user adopted a cat named Miso.", log_ids[:2], type_="Event ")
    world.reply({"memories": [cat, memory("The user owns a yacht.", [log_ids[2]], type_="boat")]})

    world.run("extractor")

    (made,) = world.active()
    assert made.type == "event"
    (record,) = world.records()
    assert record.stats["mended"] == ["extractor: item 0: type 'Event ' read as 'event'"]
    assert "type" in record.stats["dropped"][0]["reason"]  # no choice of the schema: dropped


def test_extractor_memory_over_the_content_limit_is_dropped_and_says_why(world: World) -> None:
    log_ids = world.logs(lines())
    looping = memory("The user likes cats. " * 400, log_ids[:1])  # 8,399 characters, trimmed
    world.reply({"memories": [looping, memory("The user wants answers in French.", [log_ids[2]])]})

    outcome = world.run("extractor")

    assert [m.content for m in world.active()] == ["The user wants answers in French."]
    assert outcome.stats["dropped"] == [
        {
            "item": f"extract [{log_ids[0]}]",
            "reason": "its content has 8399 characters, more than the limit of 8000"
            " (ingest.max_content_chars)",
        }
    ]


def test_extractor_memory_citing_only_foreign_lines_is_dropped_and_says_why(world: World) -> None:
    log_ids = world.logs(lines())
    world.reply(
        {
            "memories": [
                memory("The user adopted a cat named Miso.", log_ids[:2]),
                memory("The user owns a yacht.", [9999]),  # a line that was never sent
            ]
        }
    )

    outcome = world.run("extractor")

    assert [m.content for m in world.active()] == ["The user adopted a cat named Miso."]
    assert outcome.stats["dropped_ids"] == [9999]
    assert any("cites no log line of its batch" in reason for reason in reasons(world))


def test_linker_self_edge_dropped_valid_relation_applied(world: World) -> None:
    world.configure(jobs={"linker_threshold": 0.6})
    up, down, _ = world.add(
        [
            {"content": "Maya went hiking in the Alps with Tom."},
            {"content": "Maya and Tom hiking down the Alps."},
            {"content": "Maya paid her electricity bill."},
        ]
    )
    relation = {"type": "causal", "strength": 1.4, "description": "same trip"}
    world.reply(
        {
            "relations": [
                {**relation, "source_id": up, "target_id": up},  # a loop
                {**relation, "source_id": up, "target_id": down},  # strength out of range
            ]
        }
    )

    outcome = world.run("linker")

    assert outcome.status == "applied"
    assert (up, down, "causal") in world.edges(up)
    assert (up, up, "causal") not in world.edges(up)
    assert any("must differ" in reason for reason in reasons(world))
    (typed,) = [r for r in world.records() if r.stats.get("part") == "model"]
    assert typed.stats["mended"] == ["linker: item 1: strength 1.4 clamped to 1.0"]


def test_auditor_verdict_with_a_field_it_must_not_fill_is_mended(world: World) -> None:
    old, new = paris_and_lyon(world)
    world.reply(
        {
            "verdicts": [
                verdict(old, "supersede", superseded_by=new, merge_into=new),  # extra field
                verdict(new, "keep", category="duplicate"),  # keep with a category
            ]
        }
    )

    outcome = world.run("auditor")

    assert outcome.status == "applied"
    assert (world.memory(old).status, world.memory(old).replaced_by_id) == ("superseded", new)
    assert world.memory(new).status == "active"


def test_auditor_unusable_verdict_dropped_the_other_applied(world: World) -> None:
    old, new = paris_and_lyon(world)
    world.reply(
        {
            "verdicts": [
                verdict(old, "supersede"),  # says supersede but names no replacement
                verdict(new, "archive", reason="the user never said this"),
            ]
        }
    )

    outcome = world.run("auditor")

    assert outcome.status == "applied"
    assert world.memory(old).status == "active"
    assert world.memory(new).status == "archived"
    assert any("superseded_by is required" in reason for reason in reasons(world))


def test_soul_mapper_confidence_out_of_range_is_clamped_and_said(world: World) -> None:
    first, second = runs(world)
    world.reply({"traits": [trait("The user is a keen runner.", [first, second], confidence=1.2)]})

    world.run("soul_mapper")

    (made,) = [m for m in world.active() if m.metadata.get("trait") is True]
    assert made.metadata["confidence"] == 1.0
    (record,) = [r for r in world.records() if r.job == "soul_mapper"]
    assert record.stats["mended"] == ["soul_mapper: item 0: confidence 1.2 clamped to 1.0"]


def test_consolidator_summary_with_two_tags_is_fine(world: World) -> None:
    start = NOW - 2 * DAY
    ids = world.add(
        [
            {"content": "Maya went hiking in the Alps with Tom.", "timestamp": start},
            {"content": "Maya and Tom hiking down the Alps.", "timestamp": start + HOUR / 2},
        ]
    )
    summary: dict[str, Any] = {
        "summary": "Maya hiked in the Alps with Tom.",
        "importance": 6,
        "tags": ["hiking", "alps"],
        "source_ids": list(ids),
    }
    world.reply(summary)

    outcome = world.run("consolidator")

    assert outcome.status == "applied"
    (made,) = [m for m in world.active() if m.type == "interaction_summary"]
    assert made.tags == ("hiking", "alps")
