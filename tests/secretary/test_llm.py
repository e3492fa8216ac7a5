"""The LLM layer through litellm over HTTP against the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from freezegun import freeze_time
from loguru import logger

from prompts.consolidator_schema import ConsolidatorReply
from prompts.render import RenderedPrompt, render
from secretary.llm.budget import Budget, TokenLedger
from secretary.llm.client import LlmClient, response_format_for
from secretary.llm.errors import BudgetExhausted, LlmCallFailed, LlmInvalidReply, LlmNotConfigured
from secretary.llm.provider import import_litellm
from secretary.llm.settings import LlmSettings
from secretary.llm.usage import LlmUsage
from store.clock import utc_now
from tests.helpers.openai_server import (
    CHAT_COMPLETIONS,
    ScriptedOpenAIServer,
    ScriptedReply,
    chat_completion_body,
    chat_reply,
    error_reply,
)

VALID = json.dumps(
    {
        "summary": "On 2024-05-01 the user moved to Lyon for a new job.",
        "importance": 6,
        "tags": ["move", "lyon", "job"],
        "source_ids": [1, 2],
    }
)
# Valid JSON, but importance is outside 1-10.
# Covers no fragment: nothing in such a reply is usable (a rule that protects something).
OFF_SCHEMA = json.dumps({**json.loads(VALID), "source_ids": []})


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


def settings_for(server: ScriptedOpenAIServer, **overrides: Any) -> LlmSettings:
    values: dict[str, Any] = {
        "model": "openai/scripted-model",
        "api_base": server.api_base,
        "api_key": "test-key",
        "timeout_seconds": 5.0,
        "max_reply_tokens": 100,
        "max_attempts": 3,
        "retry_max_seconds": 5.0,
        # Tiny backoff keeps retry tests fast; the policy is the same.
        "backoff_initial_seconds": 0.01,
        "backoff_max_seconds": 0.05,
    }
    return LlmSettings(**(values | overrides))


def prompt() -> RenderedPrompt:
    fragments = [
        {"id": 1, "at": "2024-05-01T09:00:00+00:00", "content": "The user packs boxes."},
        {"id": 2, "at": "2024-05-01T18:00:00+00:00", "content": "The user arrives in Lyon."},
    ]
    return render("consolidator", fragments=fragments)


def chat_requests(server: ScriptedOpenAIServer) -> list[Any]:
    return [request.body for request in server.requests_on(CHAT_COMPLETIONS)]


def test_complete_valid_reply_returns_value_with_usage(server: ScriptedOpenAIServer) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID, prompt_tokens=120, completion_tokens=30))
    rendered = prompt()

    reply = LlmClient(settings_for(server)).complete(rendered, ConsolidatorReply)

    assert reply.value.source_ids == [1, 2]
    assert reply.usage == LlmUsage(
        prompt_tokens=120, completion_tokens=30, cost=None, model="openai/scripted-model"
    )
    assert reply.usage.total_tokens == 150
    assert (reply.attempts, reply.repaired) == (1, False)
    assert reply.prompt_records() == [
        {
            "id": "consolidator",
            "version": rendered.version,
            "sha256": rendered.sha256,
            "model": "openai/scripted-model",
        }
    ]


def test_complete_negative_usage_counts_the_estimates_instead(
    server: ScriptedOpenAIServer,
) -> None:
    server.enqueue(
        CHAT_COMPLETIONS, chat_reply(VALID, prompt_tokens=-100_000, completion_tokens=-5)
    )

    reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert reply.usage.prompt_tokens > 0  # not a refund to the day's budget
    assert reply.usage.completion_tokens > 0


def test_complete_known_model_counts_cost(server: ScriptedOpenAIServer) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID, prompt_tokens=1000, completion_tokens=100))

    reply = LlmClient(settings_for(server, model="openai/gpt-4o-mini")).complete(
        prompt(), ConsolidatorReply
    )

    price = import_litellm().model_cost["gpt-4o-mini"]
    expected = 1000 * price["input_cost_per_token"] + 100 * price["output_cost_per_token"]
    assert reply.usage.cost == pytest.approx(expected)


def test_complete_request_carries_schema_as_response_format(server: ScriptedOpenAIServer) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID))
    rendered = prompt()

    LlmClient(settings_for(server)).complete(rendered, ConsolidatorReply)

    (body,) = chat_requests(server)
    assert body["response_format"] == response_format_for(ConsolidatorReply)
    sent = body["response_format"]["json_schema"]
    assert sent["strict"] is True
    assert sent["schema"]["additionalProperties"] is False
    assert set(sent["schema"]["required"]) == {"summary", "importance", "tags", "source_ids"}
    assert body["messages"] == [message.as_dict() for message in rendered.messages]
    assert body["max_tokens"] == 100


def test_complete_code_fenced_json_accepted_without_repair(server: ScriptedOpenAIServer) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(f"```json\n{VALID}\n```"))

    reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert (reply.attempts, reply.repaired) == (1, False)


@pytest.mark.parametrize(
    "said",
    [
        f"Here is the JSON you asked for:\n```json\n{VALID}\n```",
        f"```json\n{VALID}\n```\nLet me know if you need anything else.",
    ],
    ids=["words-before", "words-after"],
)
def test_complete_code_fenced_json_among_words_accepted_without_repair(
    server: ScriptedOpenAIServer, said: str
) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(said))

    reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert (reply.attempts, reply.repaired) == (1, False)
    assert reply.value.importance == 6


def test_complete_malformed_json_then_repair_succeeds(server: ScriptedOpenAIServer) -> None:
    server.enqueue(
        CHAT_COMPLETIONS,
        chat_reply('{"summary": "cut off', prompt_tokens=100, completion_tokens=5),
        chat_reply(VALID, prompt_tokens=150, completion_tokens=40),
    )

    reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert reply.value.importance == 6
    assert (reply.attempts, reply.repaired) == (2, True)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (250, 45)
    assert [record["id"] for record in reply.prompt_records()] == ["consolidator", "repair"]
    repair_messages = chat_requests(server)[1]["messages"]
    assert repair_messages[-2] == {"role": "assistant", "content": '{"summary": "cut off'}
    assert "not valid JSON" in repair_messages[-1]["content"]


def _refusal(words: str | None) -> ScriptedReply:
    body = chat_completion_body("")
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": words}
    return ScriptedReply(body=body)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            _refusal("I can't help with that."),
            'not JSON: the reply says "I can\'t help with that."',
        ),
        (chat_reply("Sorry, as an AI I cannot judge memories."), "not JSON: the reply says"),
        (_refusal(None), "the reply holds no text"),
    ],
    ids=["refusal", "words", "no-text"],
)
def test_complete_reply_without_json_says_what_it_said(
    server: ScriptedOpenAIServer, reply: ScriptedReply, said: str
) -> None:
    server.enqueue(CHAT_COMPLETIONS, reply, reply)

    with pytest.raises(LlmInvalidReply) as caught:
        LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert said in str(caught.value)
    assert said in chat_requests(server)[1]["messages"][-1]["content"]  # the repair says it too


def test_complete_answers_without_choices_are_retried_then_fail_as_the_providers(
    server: ScriptedOpenAIServer,
) -> None:
    empty = chat_completion_body("") | {"choices": []}
    server.enqueue(CHAT_COMPLETIONS, *[ScriptedReply(body=empty)] * 3)

    with pytest.raises(LlmCallFailed, match="after 3 attempts") as caught:
        LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert "answered 200 with no choices" in str(caught.value)
    assert not caught.value.items_at_fault  # nothing says the prompt was at fault
    assert len(chat_requests(server)) == 3


def test_complete_schema_violation_twice_raises_invalid_reply(
    server: ScriptedOpenAIServer,
) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(OFF_SCHEMA), chat_reply(OFF_SCHEMA))

    with pytest.raises(LlmInvalidReply, match="source_ids") as caught:
        LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert len(chat_requests(server)) == 2
    assert "source_ids" in chat_requests(server)[1]["messages"][-1]["content"]
    assert caught.value.usage is not None
    assert caught.value.usage.total_tokens == 4


def test_complete_out_of_range_number_is_clamped_and_noted(server: ScriptedOpenAIServer) -> None:
    server.enqueue(
        CHAT_COMPLETIONS, chat_reply(json.dumps({**json.loads(VALID), "importance": 42}))
    )

    reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert reply.value.importance == 10
    assert reply.mended == ("importance 42 clamped to 10",)
    assert (reply.repaired, len(chat_requests(server))) == (False, 1)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_complete_transient_error_then_ok_retries(
    server: ScriptedOpenAIServer, status: int
) -> None:
    server.enqueue(CHAT_COMPLETIONS, error_reply(status), chat_reply(VALID))
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        reply = LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)
    finally:
        logger.remove(sink)

    assert (reply.attempts, reply.repaired) == (2, False)
    assert len(chat_requests(server)) == 2
    said = (
        "attempt 1 refused by the provider's rate limit" if status == 429 else "attempt 1/3 failed"
    )
    assert any(said in line for line in lines)


def test_complete_bad_request_fails_without_retry(server: ScriptedOpenAIServer) -> None:
    server.enqueue(CHAT_COMPLETIONS, error_reply(400, "unknown parameter"))

    with pytest.raises(LlmCallFailed, match="after 1 attempt"):
        LlmClient(settings_for(server)).complete(prompt(), ConsolidatorReply)

    assert len(chat_requests(server)) == 1


def test_complete_timeouts_exhaust_attempts_raise_call_failed(
    server: ScriptedOpenAIServer,
) -> None:
    client = LlmClient(settings_for(server, timeout_seconds=0.2, max_attempts=2))
    # A first call pays litellm's one-off start-up cost outside the measured time.
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID))
    client.complete(prompt(), ConsolidatorReply)
    # From now on the server would answer after 5 s; each attempt must give up after 0.2 s.
    server.set_default(CHAT_COMPLETIONS, chat_reply(VALID, delay=5.0))
    started = time.monotonic()

    with pytest.raises(LlmCallFailed, match=r"after 2 attempts.*Timeout") as caught:
        client.complete(prompt(), ConsolidatorReply)

    assert caught.value.attempts == 2
    assert "No answer within 0.2 s" in str(caught.value)  # the hint, after one full stop
    assert ".." not in str(caught.value)
    assert len(chat_requests(server)) == 3
    # Generous for a loaded machine, yet well short of one scripted delay.
    assert time.monotonic() - started < 3.0


def test_call_failed_says_the_providers_error_then_what_follows_with_one_full_stop() -> None:
    cause = RuntimeError("Request timed out.")

    waited = LlmCallFailed(
        prompt_id="p", model="m", attempts=1, seconds=1.0, cause=cause, retry_after=30.0
    )
    hinted = LlmCallFailed(
        prompt_id="p", model="m", attempts=1, seconds=1.0, cause=cause, hint="Raise it"
    )
    alone = LlmCallFailed(prompt_id="p", model="m", attempts=1, seconds=1.0, cause=cause)

    assert str(waited).endswith("Request timed out; the provider asks to retry after 30s")
    assert str(hinted).endswith("Request timed out. Raise it")
    assert str(alone).endswith("Request timed out.")


def test_complete_unreachable_server_raises_call_failed() -> None:
    with ScriptedOpenAIServer() as stopped:
        settings = settings_for(stopped, max_attempts=2)
    with pytest.raises(LlmCallFailed, match="after 2 attempt"):
        LlmClient(settings).complete(prompt(), ConsolidatorReply)


def test_budget_per_run_exhausted_mid_sequence_stops_before_sending(
    server: ScriptedOpenAIServer,
) -> None:
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID, prompt_tokens=1900, completion_tokens=50))
    client = LlmClient(settings_for(server))
    budget = Budget(namespace="ns", now=utc_now(), max_tokens_per_run=2000)
    client.complete(prompt(), ConsolidatorReply, budget=budget)

    with pytest.raises(BudgetExhausted, match="per run") as caught:
        client.complete(prompt(), ConsolidatorReply, budget=budget)

    assert len(chat_requests(server)) == 1
    assert (caught.value.scope, caught.value.used, caught.value.limit) == ("run", 1950, 2000)
    assert budget.run_used == 1950


def test_budget_per_day_exhausted_resets_next_day(server: ScriptedOpenAIServer) -> None:
    server.set_default(
        CHAT_COMPLETIONS, chat_reply(VALID, prompt_tokens=1900, completion_tokens=50)
    )
    settings = settings_for(server, max_tokens_per_day=2000)
    client = LlmClient(settings)
    ledger = TokenLedger(lambda namespace, day: 0)  # nothing recorded: in memory only

    def run_started_at(moment: str) -> None:
        # Only the run's one clock read is frozen: litellm's own logging thread keeps the
        # datetimes it makes and would trip over freezegun's after the block ends.
        with freeze_time(moment):
            budget = Budget.for_run(settings, namespace="ns", now=utc_now(), ledger=ledger)
        client.complete(prompt(), ConsolidatorReply, budget=budget)

    run_started_at("2024-05-01T22:00:00Z")
    with pytest.raises(BudgetExhausted, match="per day"):
        run_started_at("2024-05-01T23:59:00Z")
    assert len(chat_requests(server)) == 1
    run_started_at("2024-05-02T00:01:00Z")

    assert len(chat_requests(server)) == 2
    assert ledger.used_today("ns", date(2024, 5, 1)) == 1950
    assert ledger.used_today("ns", date(2024, 5, 2)) == 1950


def test_client_without_model_raises_not_configured(server: ScriptedOpenAIServer) -> None:
    client = LlmClient(settings_for(server, model=""))

    assert client.configured is False
    with pytest.raises(LlmNotConfigured, match="SECRETARY_LLM_MODEL"):
        client.complete(prompt(), ConsolidatorReply)
    assert server.requests == []


def test_budget_per_day_without_ledger_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a TokenLedger"):
        Budget(namespace="ns", now=utc_now(), max_tokens_per_day=10)


def test_budget_exact_fit_allowed_one_more_refused() -> None:
    budget = Budget(namespace="ns", now=utc_now(), max_tokens_per_run=100)
    budget.ensure_affordable(100)
    budget.record(60)

    budget.ensure_affordable(40)
    with pytest.raises(BudgetExhausted):
        budget.ensure_affordable(41)


def test_llm_module_import_leaves_litellm_unloaded() -> None:
    code = (
        "import sys, secretary.llm.client, secretary.llm.budget; sys.exit('litellm' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_rate_limit_refusals_are_waited_out_not_counted_as_failed_attempts(
    server: ScriptedOpenAIServer,
) -> None:
    """Several daemons against a provider stricter than the configured limit: a call may be
    refused several times in a row while the window drains. It is not a failure."""
    refused = ScriptedReply(
        status=429,
        body={"error": {"message": "rate limit reached", "type": "requests"}},
        headers={"Retry-After": "0"},
    )
    server.enqueue(CHAT_COMPLETIONS, *[refused] * 5, chat_reply(VALID))
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        reply = LlmClient(settings_for(server, max_attempts=3)).complete(
            prompt(), ConsolidatorReply
        )
    finally:
        logger.remove(sink)

    assert reply.attempts == 6  # five 429s, then the answer, under max_attempts = 3
    assert len(chat_requests(server)) == 6
    assert sum("refused by the provider's rate limit" in line for line in lines) == 5


def test_rate_limit_refusals_give_up_once_retry_max_seconds_pass(
    server: ScriptedOpenAIServer,
) -> None:
    client = LlmClient(settings_for(server, max_attempts=2, retry_max_seconds=1.5))
    # A first call pays litellm's one-off start-up cost outside the measured time.
    server.enqueue(CHAT_COMPLETIONS, chat_reply(VALID))
    client.complete(prompt(), ConsolidatorReply)
    server.set_default(CHAT_COMPLETIONS, error_reply(429, "rate limit reached"))
    started = time.monotonic()

    with pytest.raises(LlmCallFailed, match="RateLimitError") as caught:
        client.complete(prompt(), ConsolidatorReply)

    assert caught.value.attempts > 2  # bounded by the time, not by max_attempts
    assert time.monotonic() - started < 5.0  # 1.5 s of retrying, generous for a loaded machine


def test_failures_that_are_not_rate_limits_still_stop_at_max_attempts(
    server: ScriptedOpenAIServer,
) -> None:
    server.enqueue(
        CHAT_COMPLETIONS, error_reply(429), error_reply(503), error_reply(429), error_reply(503)
    )
    server.set_default(CHAT_COMPLETIONS, chat_reply(VALID))

    with pytest.raises(LlmCallFailed, match=r"after 4 attempts"):
        LlmClient(settings_for(server, max_attempts=2)).complete(prompt(), ConsolidatorReply)

    assert len(chat_requests(server)) == 4  # two 503s are two failures; the 429s did not count


def test_a_used_up_quota_is_no_rate_limit_and_fails_at_max_attempts(
    server: ScriptedOpenAIServer,
) -> None:
    quota = "You exceeded your current quota, please check your plan and billing details."
    server.set_default(CHAT_COMPLETIONS, error_reply(429, quota))

    with pytest.raises(LlmCallFailed, match=r"after 2 attempts") as caught:
        LlmClient(settings_for(server, max_attempts=2)).complete(prompt(), ConsolidatorReply)

    assert len(chat_requests(server)) == 2
    assert "quota is used up" in str(caught.value)
