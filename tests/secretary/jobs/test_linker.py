"""linker: associative edges from embedding neighbours; typed edges from the LLM."""

from __future__ import annotations

from secretary.jobs.linker import associative_edges
from tests.secretary.jobs.conftest import HOUR, NOW, World


def hiking(world: World) -> tuple[int, int, int]:
    # FakeEmbedder: the two hiking memories share most words, the bill shares none.
    ids = world.add(
        [
            {"content": "Maya went hiking in the Alps with Tom."},
            {"content": "Maya and Tom hiking down the Alps."},
            {"content": "Maya paid her electricity bill."},
        ]
    )
    return ids[0], ids[1], ids[2]


def test_linker_similar_memories_get_associative_edge_without_llm(world: World) -> None:
    world.configure(llm=False, jobs={"linker_threshold": 0.6})
    up, down, bill = hiking(world)

    outcome = world.run("linker")

    assert outcome.status == "applied"
    assert world.edges(up) == {(up, down, "associative")}
    assert world.edges(bill) == set()
    assert world.llm_requests == []
    assert "LLM not configured" in outcome.message
    # Nothing new for the part that needs no model; the typed edges still wait for one.
    again = world.run("linker")
    assert (again.status, again.message) == ("skipped", "LLM not configured")
    assert world.edges(up) == {(up, down, "associative")}


def test_linker_finds_older_neighbours_through_the_vector_index(world: World) -> None:
    world.configure(llm=False, jobs={"linker_threshold": 0.6})
    (up,) = world.memories(content="Maya went hiking in the Alps with Tom.")
    world.run("linker")  # indexes the first memory (outbox sync) and moves the watermark
    (down,) = world.memories(content="Maya and Tom hiking down the Alps.")

    outcome = world.run("linker")

    assert outcome.stats["new_memories"] == 1
    assert world.edges(down) == {(up, down, "associative")}


def test_linker_typed_relations_from_llm_within_the_group(world: World) -> None:
    world.configure(jobs={"linker_threshold": 0.6})
    up, down, bill = hiking(world)
    world.reply(
        {
            "relations": [
                {
                    "source_id": up,
                    "target_id": down,
                    "type": "causal",
                    "strength": 0.8,
                    "description": "Going up came before going down.",
                },
                {
                    "source_id": up,
                    "target_id": bill,
                    "type": "thematic",
                    "strength": 0.5,
                    "description": "Not in the group.",
                },
                {
                    "source_id": up,
                    "target_id": 4040,
                    "type": "thematic",
                    "strength": 0.5,
                    "description": "Invented id.",
                },
            ]
        }
    )

    outcome = world.run("linker")

    assert world.edges(up) == {(up, down, "associative"), (up, down, "causal")}
    assert outcome.stats["dropped_ids"] == [bill, 4040]
    assert len(world.llm_requests) == 1  # one group: the bill has no neighbour to relate to
    assert world.run("linker", now=NOW).status == "nothing"
    assert len(world.llm_requests) == 1


def test_linker_reply_naming_only_unsent_ids_after_its_repair_fails_and_they_wait(
    world: World,
) -> None:
    world.configure(jobs={"linker_threshold": 0.6})
    up, down, _ = hiking(world)
    counted = {
        "relations": [
            {
                "source_id": 1000 + up,
                "target_id": 1000 + down,
                "type": "causal",
                "strength": 0.8,
                "description": "Going up came before going down.",
            }
        ]
    }
    world.reply(counted, counted)

    failed = world.run("linker")

    assert failed.status == "failed"
    assert "names only ids that were not sent" in failed.message
    assert world.edges(up) == {(up, down, "associative")}  # the part needing no model
    world.reply({"relations": [{**counted["relations"][0], "source_id": up, "target_id": down}]})
    again = world.run("linker", now=NOW + HOUR)  # the group is asked about again
    assert again.status == "applied"
    assert world.edges(up) == {(up, down, "associative"), (up, down, "causal")}


def test_associative_edges_keep_the_strongest_per_memory_and_skip_existing() -> None:
    edges = [(1, 2, 0.9), (1, 3, 0.8), (1, 4, 0.7), (2, 5, 0.95)]

    chosen = associative_edges([1], edges, max_per_memory=2, existing={(1, 2)})

    assert chosen == [(1, 3, 0.8)]


def test_linker_call_lists_a_shared_neighbour_once_and_groups_as_ids(world: World) -> None:
    world.configure(jobs={"linker_threshold": 0.6})
    # The old memory shares four words with each new one; the new ones share only two.
    (old,) = world.memories(content="maya tom hiking alps sunny weekend")
    world.run("linker")  # no neighbour yet, so no call; it is indexed and seen
    first, second = world.add(
        [
            {"content": "maya tom hiking alps monday rain", "timestamp": NOW - 2 * HOUR},
            {"content": "hiking alps sunny weekend lisbon trip", "timestamp": NOW - HOUR},
        ]
    )
    world.reply({"relations": []})

    world.run("linker")

    assert len(world.llm_requests) == 1
    sent = world.sent()
    assert [m["id"] for m in sent["memories"]] == [old, first, second]  # oldest first, once
    assert all(set(m) <= {"id", "time", "content"} for m in sent["memories"])
    assert sent["groups"] == [[first, old], [second, old]]  # the new memory first


def test_linker_group_inside_another_is_asked_once_and_settled(world: World) -> None:
    world.configure(jobs={"linker_threshold": 0.6})
    up, down, bill = hiking(world)
    world.reply({"relations": []})

    world.run("linker")

    assert world.sent()["groups"] == [[up, down]]  # not again as [down, up]
    assert world.store.db.work.job_state("linker", "maya")["typed_watermark"] == bill
