"""consolidator: close, similar event fragments -> one summary with the fragments' time span."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from store.requests import SearchRequest
from tests.helpers.timeline import timeline
from tests.secretary.jobs.conftest import DAY, NOW, World

T = NOW - 2 * DAY
MINUTE = timedelta(minutes=1)
LATER = T + DAY  # the 3-hour window has long passed


def episode(world: World) -> dict[str, int]:
    ids = world.add(
        [
            {"content": "Breakfast with Anna at the bakery.", "timestamp": T - DAY},
            {"content": "Maya went hiking in the Alps with Tom.", "timestamp": T},
            {
                "content": "Maya and Tom reached the Alps summit hiking.",
                "timestamp": T + 20 * MINUTE,
            },
            {"content": "Maya paid her electricity bill.", "timestamp": T + 30 * MINUTE},
            {"content": "Maya and Tom hiking down the Alps.", "timestamp": T + 40 * MINUTE},
        ]
    )
    return dict(zip(["breakfast", "up", "top", "bill", "down"], ids, strict=True))


def summary(source_ids: list[int]) -> dict[str, Any]:
    return {
        "summary": "On the day, Maya hiked up and down the Alps with Tom.",
        "importance": 6,
        "tags": ["hiking", "alps", "tom"],
        "source_ids": source_ids,
    }


def test_consolidator_cluster_becomes_summary_spanning_its_fragments(world: World) -> None:
    m = episode(world)
    fragments = [m["up"], m["top"], m["down"]]
    world.relate(m["up"], m["breakfast"], "thematic", 0.4)
    world.reply(summary([*fragments, 999]))

    outcome = world.run("consolidator", now=LATER)

    assert outcome.status == "applied"
    assert outcome.stats["dropped_ids"] == [999]
    (made,) = [x for x in world.active() if x.type == "interaction_summary"]
    assert made.event_time == T  # the earliest fragment's time, not "now"
    assert made.metadata["span_start"] == T.isoformat()
    assert made.metadata["span_end"] == (T + 40 * MINUTE).isoformat()
    for fragment in fragments:
        row = world.memory(fragment)
        assert (row.status, row.replaced_by_id) == ("merged", made.id)
    assert timeline(world.store.db, "maya") == [m["breakfast"], made.id, m["bill"]]
    edges = world.edges(made.id)
    assert {(made.id, f, "derived_from") for f in fragments} <= edges
    assert (made.id, m["breakfast"], "thematic") in edges  # inherited from a fragment
    assert world.memory(m["bill"]).status == "active"


def test_consolidator_summary_is_indexed_and_fragments_are_not(world: World) -> None:
    m = episode(world)
    world.store.indexer.sync()
    world.reply(summary([m["up"], m["top"], m["down"]]))
    world.run("consolidator", now=LATER)

    world.store.indexer.sync()

    (made,) = [x for x in world.active() if x.type == "interaction_summary"]
    indexed = world.store.index.versions("maya")
    assert made.id in indexed
    assert not {m["up"], m["top"], m["down"]} & set(indexed)
    assert world.store.indexer.verify("maya").clean
    found = world.store.searcher.search(
        SearchRequest(namespace="maya", query="Maya hiked the Alps with Tom", k=3, reinforce=False),
        now=LATER,
    )
    hit_ids = [hit.memory.id for hit in found.hits]
    assert hit_ids[0] == made.id
    assert not {m["up"], m["top"], m["down"]} & set(hit_ids)


def test_consolidator_second_cycle_with_nothing_new_makes_no_llm_call(world: World) -> None:
    m = episode(world)
    world.reply(summary([m["up"], m["top"], m["down"]]))
    world.run("consolidator", now=LATER)

    again = world.run("consolidator", now=LATER + DAY)

    assert again.status == "nothing"
    assert len(world.llm_requests) == 1


def test_consolidator_episode_still_in_its_window_waits(world: World) -> None:
    m = episode(world)

    early = world.run("consolidator", now=T + 60 * MINUTE)

    assert early.status == "nothing"
    assert world.llm_requests == []
    world.reply(summary([m["up"], m["top"], m["down"]]))
    assert world.run("consolidator", now=LATER).status == "applied"


def test_consolidator_without_model_leaves_cluster_alone(world: World) -> None:
    world.configure(llm=False)
    episode(world)

    outcome = world.run("consolidator", now=LATER)

    assert (outcome.status, outcome.message) == ("skipped", "LLM not configured")
    assert outcome.stats["clusters"] == 1
    assert len(world.active()) == 5
    assert world.store.db.work.job_state("consolidator", "maya") == {}


def test_consolidator_reply_covering_one_fragment_changes_nothing(world: World) -> None:
    m = episode(world)
    world.reply(summary([m["up"]]))

    outcome = world.run("consolidator", now=LATER)

    assert outcome.status == "nothing"
    assert outcome.stats["clusters_too_small"] == 1
    assert len(world.active()) == 5


def test_consolidator_prompt_lists_fragments_oldest_first_without_their_type(
    world: World,
) -> None:
    m = episode(world)
    world.reply(summary([m["up"], m["top"], m["down"]]))

    world.run("consolidator", now=LATER)

    fragments = world.sent()["fragments"]
    assert [f["id"] for f in fragments] == [m["up"], m["top"], m["down"]]
    assert fragments[0] == {
        "id": m["up"],
        "time": T.strftime("%Y-%m-%d %H:%M"),
        "content": "Maya went hiking in the Alps with Tom.",
    }
    assert all(set(f) == {"id", "time", "content"} for f in fragments)  # 20 minutes apart
