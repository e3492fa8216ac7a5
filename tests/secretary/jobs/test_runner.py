"""The job boundary: failures, retries, budgets, the change cap, protection, dry runs."""

from __future__ import annotations

import json

import pytest

from secretary.cycle import run_cycle
from secretary.jobs.extractor import Extractor
from secretary.jobs.registry import JOBS, UnknownJob
from secretary.llm.budget import TokenLedger
from secretary.runner import run_job
from store.shapes.records import dropped_items
from tests.helpers.db_faults import cut
from tests.helpers.openai_server import CHAT_COMPLETIONS, chat_reply, error_reply
from tests.secretary.jobs.conftest import HOUR, NOW, World

GOOD = {
    "memories": [
        {
            "content": "The user adopted a cat named Miso.",
            "type": "event",
            "importance": 6,
            "tags": ["cat", "pets", "miso"],
            "source_log_ids": [1],
        }
    ]
}


def three_logs(world: World) -> list[int]:
    return world.logs(
        [
            ("user", "I adopted a cat, Miso.", NOW - 3 * HOUR),
            ("user", "Miso sleeps on my keyboard.", NOW - 2 * HOUR),
            ("user", "I am allergic to peanuts.", NOW - HOUR),
        ]
    )


def assert_failed_and_nothing_applied(world: World, error: str) -> None:
    (record,) = world.records()
    assert record.status == "failed"
    assert error in (record.error or "")
    assert world.active() == []
    assert world.store.db.work.job_state("extractor", "maya") == {}


def test_run_job_malformed_json_fails_cleanly_with_record(world: World) -> None:
    three_logs(world)
    world.reply("this is not JSON {", "still not JSON")

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert "LlmInvalidReply" in outcome.message
    assert_failed_and_nothing_applied(world, "invalid reply")
    (record,) = world.records()
    assert record.tokens_in == 20  # both the reply and the repair attempt were paid for
    assert record.prompts[0]["id"] == "extractor"


def test_run_job_schema_violation_fails_cleanly_with_record(world: World) -> None:
    three_logs(world)
    bad = json.loads(json.dumps(GOOD))
    bad["memories"][0]["type"] = "opinion"  # no such type: nothing in the reply is usable
    world.reply(bad, bad)

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert_failed_and_nothing_applied(world, "type")


def test_run_job_rate_limited_then_success_applies(world: World) -> None:
    three_logs(world)
    world.server.enqueue(CHAT_COMPLETIONS, error_reply(429, "slow down"))
    world.reply(GOOD)

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    assert len(world.llm_requests) == 2
    assert len(world.active()) == 1


def test_run_job_server_errors_outlast_retries_fail_with_record(world: World) -> None:
    three_logs(world)
    world.configure(max_attempts=2)
    world.server.enqueue(CHAT_COMPLETIONS, error_reply(500), error_reply(503))

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert len(world.llm_requests) == 2
    assert_failed_and_nothing_applied(world, "LlmCallFailed")


def test_run_job_timeouts_fail_with_record(world: World) -> None:
    three_logs(world)
    world.configure(max_attempts=2, timeout_seconds=0.3)
    slow = chat_reply(json.dumps(GOOD), delay=1.0)
    world.server.enqueue(CHAT_COMPLETIONS, slow, slow)

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert_failed_and_nothing_applied(world, "LlmCallFailed")


def test_run_job_budget_reached_mid_run_applies_finished_batches_only(world: World) -> None:
    log_ids = three_logs(world)
    # One line per call; the first call's reported usage leaves no room for a second one.
    world.configure(jobs={"batch_size": 1}, max_tokens_per_run=3000)
    world.reply(GOOD, prompt_tokens=2500)

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    assert "budget" in outcome.stats["stopped"]
    assert len(world.llm_requests) == 1
    assert len(world.active()) == 1
    assert world.store.db.work.job_state("extractor", "maya") == {"watermark": log_ids[0]}
    (record,) = world.records()
    assert record.status == "applied"
    assert record.tokens_in == 2500
    assert "budget" in record.stats["stopped"]


def test_run_job_budget_exhausted_before_any_call_is_refused_and_recorded(world: World) -> None:
    three_logs(world)
    world.configure(max_tokens_per_run=50)

    outcome = world.run("extractor")

    assert outcome.status == "refused"
    assert "budget" in outcome.message
    assert world.llm_requests == []
    assert world.store.db.work.job_state("extractor", "maya") == {}
    (record,) = world.records()
    assert record.status == "refused"
    assert "budget" in record.stats["stopped"]


def test_record_ledger_counts_the_days_recorded_tokens(world: World) -> None:
    three_logs(world)
    world.reply(GOOD, prompt_tokens=400)
    world.run("extractor")
    ledger = TokenLedger(world.store.db.records.tokens_on)

    ledger.add("maya", NOW.date(), 7)

    assert ledger.used_today("maya", NOW.date()) == 401 + 7
    assert ledger.used_today("maya", (NOW + 24 * HOUR).date()) == 0
    assert ledger.used_today("other", NOW.date()) == 0


def test_run_job_day_budget_spent_by_earlier_runs_stops_the_next(world: World) -> None:
    three_logs(world)
    world.configure(jobs={"batch_size": 1}, max_tokens_per_day=3000)
    world.reply(GOOD, prompt_tokens=2500)
    world.run("extractor")

    outcome = world.run("extractor")  # a new run: its own budget, but the same day

    assert outcome.status == "refused"
    assert "per day" in outcome.message
    assert len(world.llm_requests) == 1


def test_run_job_unexpected_error_is_recorded_as_failed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Extractor, ctx: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Extractor, "parts", broken)

    outcome = world.run("extractor")

    assert (outcome.status, outcome.message) == ("failed", "RuntimeError: disk on fire")
    (record,) = world.records()
    assert (record.status, record.error) == ("failed", "RuntimeError: disk on fire")


def test_run_job_database_cut_says_its_first_line_and_records_all_of_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A connection cut mid-run (pg_terminate_backend): the outcome `secretary dream` prints and
    # status shows was the error with SQLAlchemy's statement, parameters and link, 7 lines.
    def cut_short(self: Extractor, ctx: object) -> None:
        cut(world.store.engine)

    monkeypatch.setattr(Extractor, "parts", cut_short)

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert outcome.message.startswith("OperationalError: (")
    assert "\n" not in outcome.message
    assert world.health("extractor")["last"]["message"] == outcome.message
    (record,) = world.records()
    assert record.error is not None
    assert record.error.startswith(outcome.message + "\n[SQL: ")


def test_run_job_keyboard_interrupt_is_recorded_and_reraised(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: Extractor, ctx: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Extractor, "parts", interrupted)

    with pytest.raises(KeyboardInterrupt):
        world.run("extractor")
    (record,) = world.records()
    assert (record.status, record.error) == ("failed", "interrupted (KeyboardInterrupt)")
    # Ctrl-C is no failure of the job: no back-off for the daemon's next firing.
    health = world.health("extractor")
    assert "failures" not in health
    assert "backoff_until" not in health
    assert health["last"]["message"] == "interrupted (KeyboardInterrupt)"


def test_run_job_dry_run_plans_but_writes_nothing(world: World) -> None:
    three_logs(world)
    world.reply(GOOD)

    outcome = world.run("extractor", dry_run=True)

    assert outcome.status == "planned"
    assert outcome.plan is not None
    assert len(outcome.plan.changes) == 1
    assert world.active() == []
    assert world.store.db.work.job_state("extractor", "maya") == {}
    # It asked the model: the tokens it spent are recorded (and count against the day's budget).
    (record,) = world.records()
    assert (record.status, record.stats["dry_run"], record.tokens_in) == ("applied", True, 10)
    assert world.store.db.records.get(record.id)[1] == []  # no operation
    assert "1 LLM call, 10 + 1 tokens" in outcome.message


def test_run_job_dry_run_without_model_calls_writes_no_record(world: World) -> None:
    world.configure(llm=False)
    world.add([{"content": "The user is allergic to peanuts.", "type": "fact"}])
    before = world.records()

    outcome = world.run("auditor", dry_run=True)

    assert world.records() == before  # the ingest's only
    # Nothing to change: the dry run says what the run says, not "planned".
    run = world.run("auditor")
    assert (outcome.status, outcome.message) == (run.status, run.message)
    assert outcome.status in ("skipped", "nothing")


def test_run_job_unknown_name_raises(world: World) -> None:
    with pytest.raises(UnknownJob, match="dreaming"):
        world.run("dreaming")


def test_run_cycle_without_model_runs_deterministic_jobs_only(world: World) -> None:
    world.configure(llm=False)
    three_logs(world)
    world.memories(content="The user likes green tea.", type="preference")

    outcomes = run_cycle(world.store, world.settings, now=NOW)

    by_job = {o.job: o for o in outcomes}
    assert list(by_job) == list(JOBS)
    assert by_job["extractor"].status == "skipped"
    assert by_job["soul_mapper"].status == "skipped"
    assert by_job["retention"].status == "nothing"
    assert world.llm_requests == []


def test_each_run_of_a_cycle_starts_its_record_when_it_starts(world: World) -> None:
    for namespace in ("maya", "zoe"):
        line = {"session_id": "s1", "role": "user", "timestamp": (NOW - HOUR).isoformat()}
        world.store.add_logs(
            namespace, [{**line, "content": "I adopted a cat.", "idempotency_key": "k"}], now=NOW
        )
    world.reply(GOOD, GOOD)
    clock = iter(float(n * 90) for n in range(1000))  # each look at the clock: 90 s later

    outcomes = run_cycle(
        world.store,
        world.settings,
        now=NOW,
        namespaces=["maya", "zoe"],
        jobs=["extractor"],
        monotonic=lambda: next(clock),
    )

    records = [world.store.db.records.get(r)[0] for o in outcomes for r in o.records]
    assert [(r.job, r.namespace) for r in records] == [("extractor", "maya"), ("extractor", "zoe")]
    assert NOW < records[0].started_at < records[1].started_at  # not the cycle's start for all
    assert all(r.finished_at is not None and r.finished_at > r.started_at for r in records)


def test_namespaces_with_work_lists_memory_and_log_namespaces(world: World) -> None:
    world.memories(content="a memory")
    world.store.add_logs(
        "other",
        [{"session_id": "s", "role": "user", "content": "hi", "timestamp": NOW.isoformat()}],
        now=NOW,
    )

    assert world.store.db.work.namespaces_with_work() == ["maya", "other"]


def test_run_job_pending_plan_blocks_the_next_run(world: World) -> None:
    world.configure(jobs={"approval": "all"})
    three_logs(world)
    world.reply(GOOD)
    planned = world.run("extractor")
    assert planned.status == "planned"

    again = run_job(world.store, world.settings, "extractor", "maya", now=NOW)

    assert again.status == "skipped"
    assert f"#{planned.record_id}" in again.message
    assert len(world.llm_requests) == 1


def test_a_two_part_run_names_each_part_with_its_record(world: World) -> None:
    """The linker writes its associative edges (no model) and its typed ones (the model) in
    two records: the outcome names both, and first the one that changed something."""
    ids = world.add(
        [
            {"content": "Maya went hiking in the Alps with Tom."},
            {"content": "Maya and Tom went hiking in the Alps."},
        ]
    )
    world.reply({"relations": []})  # the model adds nothing

    outcome = world.run("linker")

    first, second = outcome.records
    assert outcome.record_id == first  # the deterministic part's, which made the edge
    assert outcome.message == (
        f"deterministic: 1 change applied (1 operation) (record #{first}); "
        f"model: nothing to change; 1 LLM call, 11 tokens (record #{second})"
    )
    assert world.edges(ids[0]) == {(ids[0], ids[1], "associative")}


# -- what a run's message says -----------------------------------------------------------------


def test_extractor_reply_citing_no_line_it_was_sent_is_repaired(world: World) -> None:
    """A model numbering the lines itself (0, 1, 2 for ids 1, 2, 3) would have every memory
    dropped and the lines passed by as if they held nothing: the reply is sent back instead."""
    lines = three_logs(world)
    renumbered = {"memories": [{**GOOD["memories"][0], "source_log_ids": [0]}]}
    world.reply(renumbered, GOOD)

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    (memory,) = world.active()
    assert memory.metadata["source_log_ids"] == [lines[0]]
    repair = world.llm_requests[-1]["messages"][-1]["content"]
    assert "none of the 1 memories cites a line that was sent (they cite 0)" in repair
    assert f"the ids of the lines given, {lines[0]}, {lines[1]}, {lines[2]}" in repair


def test_extractor_reply_citing_no_line_after_its_repair_fails_and_keeps_the_lines(
    world: World,
) -> None:
    three_logs(world)
    invented = {"memories": [{**GOOD["memories"][0], "source_log_ids": [4242]}]}
    world.reply(invented, invented)

    outcome = world.run("extractor")

    assert outcome.status == "failed"
    assert "cites a line that was sent" in outcome.message
    assert_failed_and_nothing_applied(world, "cites a line that was sent")
    world.reply(GOOD)  # the lines wait for the next run
    assert world.run("extractor", now=NOW + HOUR).status == "applied"
    assert [m.content for m in world.active()] == [GOOD["memories"][0]["content"]]


def test_extractor_memory_said_twice_is_one_memory_citing_both_lines(world: World) -> None:
    lines = three_logs(world)
    said = GOOD["memories"][0]
    world.reply(
        {
            "memories": [
                {**said, "source_log_ids": [lines[1]], "importance": 4, "tags": ["cat"]},
                {**said, "source_log_ids": [lines[0]], "importance": 7, "tags": ["pet"]},
            ]
        }
    )

    outcome = world.run("extractor")

    (memory,) = world.active()
    assert memory.metadata["source_log_ids"] == [lines[0], lines[1]]
    assert memory.event_time == world.store.db.work.logs("maya", [lines[0]])[0].timestamp
    assert (memory.importance, memory.tags) == (7, ("cat", "pet"))
    (record,) = world.records()
    assert record.stats["memories"] == 1
    assert dropped_items(record.stats) == [
        {"item": f"memory {said['content']!r}", "reason": "said again in the reply: kept once"}
    ]
    assert outcome.status == "applied"


def test_run_job_applied_says_changes_in_the_singular_and_what_it_spent(world: World) -> None:
    three_logs(world)
    world.reply(GOOD)

    outcome = world.run("extractor")

    assert outcome.message.startswith("1 change applied (")
    assert outcome.message.endswith("; 1 LLM call, 11 tokens")
    assert "(s)" not in outcome.message


def test_run_job_manual_run_overrides_the_back_off_and_says_so(world: World) -> None:
    three_logs(world)
    world.server.chat_content = "Sure! Here are the memories you asked for."
    assert world.run("extractor").status == "failed"
    world.server.chat_content = "ok"
    world.reply(GOOD)

    scheduled = world.run("extractor", now=NOW + HOUR / 60)
    manual = run_job(
        world.store, world.settings, "extractor", "maya", now=NOW + HOUR / 60, manual=True
    )

    assert scheduled.status == "skipped"
    assert scheduled.message.startswith("backing off after 1 failed run until ")
    assert manual.status == "applied"
    assert manual.message.startswith("ran now, overriding the back-off after 1 failed run until ")
    assert "failures" not in world.health("extractor")  # a run that worked ends the back-off
