"""Failure has a cost limit: back-off, quarantine, Retry-After, one run at a time, kept refusals.

Through litellm against the scripted server; time is an input (``now``), never slept away.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

from secretary.cycle import run_cycle
from store.coordination.leases import Lease
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedReply, chat_reply, error_reply
from tests.secretary.jobs.conftest import HOUR, NOW, World
from tests.secretary.jobs.test_auditor import paris_and_lyon, verdict
from tests.secretary.jobs.test_runner import GOOD, three_logs

MINUTE = timedelta(minutes=1)


def broken_model(world: World) -> None:
    """Every reply is prose, so every call ends invalid after its repair attempt."""
    world.server.chat_content = "Sure! Here are the memories you asked for."


def test_failed_run_backs_off_and_later_firings_say_why(world: World) -> None:
    three_logs(world)
    broken_model(world)

    failed = world.run("extractor")
    skipped = world.run("extractor", now=NOW + MINUTE)
    world.server.chat_content = "ok"
    world.reply(GOOD)
    later = world.run("extractor", now=NOW + 6 * MINUTE)

    assert failed.status == "failed"
    assert (skipped.status, skipped.stats) == ("skipped", {})
    assert "backing off after 1 failed run until 2026-03-01T12:05:00" in skipped.message
    assert len(world.llm_requests) == 3  # the failed call and its repair, then one that works
    assert later.status == "applied"
    health = world.health("extractor")
    assert "failures" not in health
    assert "backoff_until" not in health
    assert health["last"]["status"] == "applied"


def test_back_off_doubles_with_each_failure_in_a_row(world: World) -> None:
    three_logs(world)
    broken_model(world)
    world.configure(jobs={"quarantine_after": 10})

    world.run("extractor")
    world.run("extractor", now=NOW + 5 * MINUTE)
    third = world.run("extractor", now=NOW + 15 * MINUTE)
    too_soon = world.run("extractor", now=NOW + 30 * MINUTE)

    assert third.status == "failed"
    assert world.health("extractor")["failures"] == 3
    assert world.health("extractor")["backoff_until"] == (NOW + 35 * MINUTE).isoformat()
    assert too_soon.status == "skipped"


def test_batch_failing_three_times_is_quarantined_and_the_job_moves_on(world: World) -> None:
    log_ids = three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0, "batch_size": 2})
    broken_model(world)

    outcomes = [world.run("extractor", now=NOW + n * MINUTE) for n in range(3)]

    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    third = world.records()[-1]
    assert third.stats["quarantined"] == log_ids[:2]  # the first call's lines
    assert "quarantined 2 items" in outcomes[-1].message
    assert world.health("extractor")["quarantined"] == log_ids[:2]
    # The model works again: the next run skips the quarantined lines and moves past them.
    world.server.chat_content = "ok"
    last_line = {**GOOD["memories"][0], "content": "The user is allergic.", "source_log_ids": [3]}
    world.reply({"memories": [last_line]})
    moved = world.run("extractor", now=NOW + 3 * MINUTE)
    assert moved.status == "applied"
    assert world.store.db.work.job_state("extractor", "maya") == {"watermark": log_ids[-1]}
    sent = world.llm_requests[-1]["messages"][-1]["content"]
    assert f'"id":{log_ids[2]}' in sent
    assert f'"id":{log_ids[0]}' not in sent


def test_a_model_server_failing_quarantines_nothing(world: World) -> None:
    # Three runs in a row fail on the same call, but because the server answers 503 to every
    # attempt: that says nothing of the lines, which must not be set aside.
    log_ids = three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0, "batch_size": 2})
    world.server.enqueue(CHAT_COMPLETIONS, *[error_reply(503, "overloaded")] * 9)

    outcomes = [world.run("extractor", now=NOW + n * MINUTE) for n in range(3)]

    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    assert len(world.llm_requests) == 9  # every attempt of every run reached the server
    assert "quarantined" not in outcomes[-1].message
    assert world.records()[-1].stats["failed_batch"] == log_ids[:2]
    assert "quarantined" not in world.records()[-1].stats
    health = world.health("extractor")
    assert "quarantined" not in health
    assert "failing" not in health
    assert health["failures"] == 3
    sent = len(world.llm_requests)
    world.reply(GOOD)  # the server is back: the run sends the same lines again
    world.run("extractor", now=NOW + 3 * MINUTE)
    assert f'"id":{log_ids[0]}' in world.llm_requests[sent]["messages"][-1]["content"]


def no_choices() -> ScriptedReply:
    """A 200 answer that generated nothing, as some providers and proxies send one."""
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}
    return ScriptedReply(body=body | {"usage": {"prompt_tokens": 3, "total_tokens": 3}})


def test_answers_without_choices_are_retried_and_quarantine_nothing(world: World) -> None:
    # A provider answering 200 with nothing generated said nothing of the lines: the call is
    # retried, and a run whose every attempt got such an answer backs off like a 502.
    log_ids = three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0})
    world.server.enqueue(CHAT_COMPLETIONS, no_choices(), chat_reply(json.dumps(GOOD)))

    recovered = world.run("extractor")

    assert recovered.status == "applied"
    assert len(world.llm_requests) == 2
    world.logs([("user", "I moved to Lyon.", NOW)])
    world.server.enqueue(CHAT_COMPLETIONS, *[no_choices()] * 9)
    outcomes = [world.run("extractor", now=NOW + n * MINUTE) for n in range(1, 4)]

    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    assert "no choices" in outcomes[-1].message
    assert len(world.llm_requests) == 2 + 9  # every attempt of every run reached the server
    assert "quarantined" not in world.health("extractor")
    assert log_ids[-1] < world.records()[-1].stats["failed_batch"][0]


def test_a_request_refused_for_its_length_counts_towards_quarantine(world: World) -> None:
    log_ids = three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0, "batch_size": 2})
    too_long = "This model's maximum context length is 8192 tokens. However, you requested 9000."
    world.server.enqueue(CHAT_COMPLETIONS, *[error_reply(400, too_long)] * 3)

    outcomes = [world.run("extractor", now=NOW + n * MINUTE) for n in range(3)]

    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    assert len(world.llm_requests) == 3  # refused at once: no retries
    assert world.health("extractor")["quarantined"] == log_ids[:2]


def test_retry_quarantined_sends_them_again_and_clears_the_quarantine(world: World) -> None:
    log_ids = three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0, "quarantine_after": 1})
    broken_model(world)
    world.run("extractor")
    world.server.chat_content = "ok"

    world.reply(GOOD)
    retried = world.run("extractor", now=NOW + MINUTE, retry_quarantined=True)

    assert retried.status == "applied"
    assert [m.content for m in world.active()] == ["The user adopted a cat named Miso."]
    assert "quarantined" not in world.health("extractor")
    # The watermark is the normal runs': the retry only sent the quarantined lines.
    assert world.store.db.work.job_state("extractor", "maya") == {}
    assert sorted(log_ids) == sorted(int(i) for i in retried.plan.answered)  # type: ignore[union-attr]


def test_retry_after_beyond_the_retry_bound_backs_off_at_least_that_long(world: World) -> None:
    three_logs(world)
    world.configure(jobs={"failure_backoff_minutes": 0}, retry_max_seconds=1.0)
    slow_down = ScriptedReply(
        status=429,
        body={"error": {"message": "slow down", "type": "rate_limit"}},
        # Beyond the 1 s bound, and short: the provider's pause holds every process for
        # this long in real time, so the run that is allowed waits it out.
        headers={"Retry-After": "3"},
    )
    world.server.enqueue(CHAT_COMPLETIONS, slow_down)

    failed = world.run("extractor")
    backoff_until = world.health("extractor")["backoff_until"]
    waiting = world.run("extractor", now=NOW + timedelta(seconds=2))
    world.reply(GOOD)
    allowed = world.run("extractor", now=NOW + timedelta(seconds=4))

    assert failed.status == "failed"
    assert "retry after 3s" in (world.records()[0].error or "")
    assert backoff_until == (NOW + timedelta(seconds=3)).isoformat()
    assert len(world.llm_requests) == 2  # 429, then (after the wait) the run that works
    assert waiting.status == "skipped"
    assert allowed.status == "applied"


def test_retry_after_within_the_bound_is_waited_for(world: World) -> None:
    three_logs(world)
    world.configure(retry_max_seconds=5.0)
    world.server.enqueue(
        CHAT_COMPLETIONS,
        ScriptedReply(
            status=429,
            body={"error": {"message": "slow down", "type": "rate_limit"}},
            headers={"Retry-After": "1"},
        ),
        chat_reply(__import__("json").dumps(GOOD)),
    )
    started = time.monotonic()

    outcome = world.run("extractor")

    assert outcome.status == "applied"
    assert time.monotonic() - started >= 1.0  # backoff_initial_seconds is 0.01 in these tests


def test_llm_failure_keeps_the_deterministic_changes(world: World) -> None:
    old, new = paris_and_lyon(world)
    _first, twin = world.add(
        [
            {"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "a"},
            {"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "b"},
        ]
    )
    world.server.enqueue(CHAT_COMPLETIONS, error_reply(500), error_reply(500), error_reply(500))

    outcome = world.run("auditor")

    assert outcome.status == "failed"
    assert world.memory(twin).status == "merged"  # exact duplicate: no model needed
    assert {world.memory(old).status, world.memory(new).status} == {"active"}
    statuses = [(r.status, r.stats.get("part")) for r in world.records() if r.job == "auditor"]
    assert statuses == [("applied", "deterministic"), ("failed", None)]
    state = world.store.db.work.job_state("auditor", "maya")
    assert state["exact_watermark"] == twin
    assert "watermark" not in state


def extractor_held_elsewhere(world: World) -> Lease:
    """Take the extractor's lease on the namespace as another process (host) would."""
    other = Lease(
        world.store.engine,
        holder="otherhost:1:abc",
        ttl=timedelta(minutes=10),
        name="run:extractor:maya",
    )
    other.acquire()
    return other


def test_cycle_waits_for_a_job_another_process_runs_then_runs_it(world: World) -> None:
    three_logs(world)
    other = extractor_held_elsewhere(world)
    world.reply(GOOD)
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the other process's run ends while we wait
        waits.append(seconds)
        if len(waits) == 3:
            other.release()

    outcomes = run_cycle(
        world.store, world.settings, now=NOW, namespaces=["maya"], jobs=["extractor"], sleep=sleep
    )

    assert len(waits) == 3
    assert [(o.job, o.status, o.busy) for o in outcomes] == [("extractor", "applied", False)]
    assert len(world.llm_requests) == 1


def test_cycle_gives_up_waiting_after_the_lease_life(world: World) -> None:
    three_logs(world)
    extractor_held_elsewhere(world)
    clock = iter(range(0, 10_000, 100))

    outcomes = run_cycle(
        world.store,
        world.settings,
        now=NOW,
        namespaces=["maya"],
        jobs=["extractor"],
        sleep=lambda seconds: None,
        monotonic=lambda: float(next(clock)),
    )

    assert [(o.status, o.busy) for o in outcomes] == [("skipped", True)]
    assert "already running on 'maya' by otherhost:1:abc" in outcomes[0].message
    assert world.llm_requests == []


def test_second_run_of_a_job_on_a_namespace_is_skipped_while_one_runs(world: World) -> None:
    three_logs(world)
    other = extractor_held_elsewhere(world)

    busy = world.run("extractor")
    other.release()
    world.reply(GOOD)
    free = world.run("extractor")

    assert busy.status == "skipped"
    assert "already running on 'maya' by otherhost:1:abc" in busy.message
    assert world.records()[0].job == "extractor"
    assert free.status == "applied"
    assert len(world.llm_requests) == 1


def test_cap_refused_plan_is_kept_not_planned_again_and_approvable(world: World) -> None:
    from secretary.approval import approve_plan, pending_plans

    old, new = paris_and_lyon(world)
    world.configure(guardrails={"max_changes_per_run": 1})
    world.reply({"verdicts": [verdict(old, "archive"), verdict(new, "archive")]})

    refused = world.run("auditor")
    again = world.run("auditor", now=NOW + HOUR)

    assert refused.status == "refused"
    assert f"secretary plans approve {refused.record_id}" in refused.message
    assert again.status == "skipped"
    assert "refused by the change cap and nothing changed since" in again.message
    assert len(world.llm_requests) == 1  # not asked again
    assert [p.record_id for p in pending_plans(world.store.db)] == [refused.record_id]

    approved = approve_plan(world.store, world.settings, refused.record_id or 0, now=NOW + HOUR)

    assert approved.status == "applied"
    assert {world.memory(old).status, world.memory(new).status} == {"archived"}


def test_cap_refused_plan_is_planned_again_once_the_cap_changes(world: World) -> None:
    old, new = paris_and_lyon(world)
    world.configure(guardrails={"max_changes_per_run": 1})
    world.reply({"verdicts": [verdict(old, "archive"), verdict(new, "archive")]})
    world.run("auditor")
    world.configure(guardrails={"max_changes_per_run": 5})
    world.reply({"verdicts": [verdict(old, "archive"), verdict(new, "keep")]})

    outcome = world.run("auditor", now=NOW + HOUR)

    assert outcome.status == "applied"
    assert world.memory(old).status == "archived"
    assert world.memory(new).status == "active"
