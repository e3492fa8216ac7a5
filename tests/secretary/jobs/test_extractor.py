"""extractor: conversation logs -> memories, through litellm against the scripted server."""

from __future__ import annotations

from datetime import datetime

from tests.secretary.jobs.conftest import HOUR, NOW, World

T0 = NOW - 3 * HOUR


def lines() -> list[tuple[str, str, datetime]]:
    return [
        ("user", "I finally adopted a cat yesterday, her name is Miso.", T0),
        ("assistant", "Congratulations! How is Miso settling in?", T0 + HOUR / 6),
        ("user", "Great. Please always answer me in French from now on.", T0 + HOUR),
    ]


def memory(content: str, ids: list[int], *, type_: str = "event") -> dict[str, object]:
    return {
        "content": content,
        "type": type_,
        "importance": 7,
        "tags": ["Cat", "pets", "miso", "pets"],
        "source_log_ids": ids,
    }


def test_extractor_new_logs_create_memories_with_log_time_and_session(world: World) -> None:
    log_ids = world.logs(lines())
    world.reply(
        {
            "memories": [
                memory("The user adopted a cat named Miso on 2026-02-28.", log_ids[:2]),
                memory("The user wants answers in French.", [log_ids[2]], type_="preference"),
            ]
        }
    )

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    cat, french = world.active()
    assert cat.event_time == T0  # the earliest cited line's time, not "now"
    assert cat.session_id == "s1"
    assert cat.metadata["source_log_ids"] == log_ids[:2]
    assert cat.tags == ("cat", "pets", "miso")
    assert (cat.type, cat.importance, french.type) == ("event", 7, "preference")
    assert french.event_time == T0 + HOUR
    assert (cat.next_id, french.prev_id) == (french.id, cat.id)  # linked into the timeline
    assert world.store.db.work.job_state("extractor", "maya") == {"watermark": log_ids[-1]}
    record, operations = world.store.db.records.get(outcome.record_id or 0)
    assert record.model == "openai/test-model"
    assert [p["id"] for p in record.prompts] == ["extractor"]
    assert record.prompts[0]["version"] >= 1
    assert len(record.prompts[0]["sha256"]) == 64
    assert (record.tokens_in, record.tokens_out) == (10, 1)
    assert sum(op.op == "create_memory" for op in operations) == 2


def test_extractor_second_cycle_with_nothing_new_makes_no_llm_call(world: World) -> None:
    world.logs(lines())
    world.reply({"memories": [memory("The user adopted a cat named Miso.", [1])]})
    assert world.run("extractor").status == "applied"
    records = len(world.records())

    again = world.run("extractor")

    assert again.status == "nothing"
    assert len(world.llm_requests) == 1
    assert len(world.records()) == records
    assert len(world.active()) == 1


def test_extractor_only_new_lines_are_sent_on_the_next_cycle(world: World) -> None:
    first = world.logs(lines()[:2])
    world.reply({"memories": []})
    world.run("extractor")
    later = world.logs([("user", "Miso knocked over my coffee.", NOW - HOUR)], session="s2")
    world.reply({"memories": [memory("Miso knocked over the user's coffee.", later)]})

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    sent = world.llm_requests[1]["messages"][-1]["content"]
    assert "coffee" in sent
    assert "adopted" not in sent
    (made,) = world.active()
    assert made.session_id == "s2"
    assert world.store.db.work.job_state("extractor", "maya")["watermark"] == later[0]
    assert first[-1] < later[0]


def test_extractor_ids_outside_the_batch_are_dropped_and_counted(world: World) -> None:
    log_ids = world.logs(lines())
    world.reply(
        {
            "memories": [
                memory("The user adopted a cat named Miso.", [log_ids[0], 999]),
                memory("Invented: the user owns a horse.", [4242]),
            ]
        }
    )

    outcome = world.run("extractor")

    (made,) = world.active()
    assert made.metadata["source_log_ids"] == [log_ids[0]]
    assert outcome.stats["dropped_ids"] == [999, 4242]
    assert outcome.stats["uncited_memories"] == 1


def test_extractor_memory_already_present_is_not_created_twice(world: World) -> None:
    world.memories(content="The user adopted a cat named Miso.", session_id="s1")
    world.logs(lines())
    world.reply({"memories": [memory("The user adopted a cat named Miso.", [1])]})

    outcome = world.run("extractor")

    assert outcome.status == "nothing"
    assert outcome.stats["already_present"] == 1
    assert len(world.active()) == 1
    assert world.store.db.work.job_state("extractor", "maya") == {"watermark": 3}


def test_extractor_without_model_is_skipped_as_not_configured(world: World) -> None:
    world.configure(llm=False)
    world.logs(lines())

    outcome = world.run("extractor")

    assert (outcome.status, outcome.message) == ("skipped", "LLM not configured")
    assert world.llm_requests == []
    assert world.store.db.work.job_state("extractor", "maya") == {}


def test_extractor_prompt_lines_with_minute_times_and_no_repeated_time(world: World) -> None:
    log_ids = world.logs([*lines(), ("assistant", "D'accord, Maya.", T0 + HOUR)])
    world.reply({"memories": []})

    world.run("extractor")

    sent = world.sent()["log"]
    assert sent[0] == {
        "id": log_ids[0],
        "time": T0.strftime("%Y-%m-%d %H:%M"),
        "role": "user",
        "text": "I finally adopted a cat yesterday, her name is Miso.",
    }
    assert [line.get("time") for line in sent] == [
        T0.strftime("%Y-%m-%d %H:%M"),
        (T0 + HOUR / 6).strftime("%Y-%m-%d %H:%M"),
        (T0 + HOUR).strftime("%Y-%m-%d %H:%M"),
        None,  # the same minute as the line before
    ]


def test_extractor_lines_split_into_even_calls(world: World) -> None:
    world.configure(jobs={"batch_size": 4})
    world.logs([("user", f"Line number {n} about the cat.", T0 + n * HOUR / 60) for n in range(6)])
    world.reply({"memories": []}, {"memories": []})

    outcome = world.run("extractor")

    assert [len(world.sent(n)["log"]) for n in range(2)] == [3, 3]
    assert outcome.stats["logs_read"] == 6
