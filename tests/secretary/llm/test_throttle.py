"""The model's shared rate limit: the throttle alone, then two clients on two engines of one
database (two daemons) against the scripted OpenAI-compatible server, through litellm."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from sqlalchemy import Engine

from prompts.consolidator_schema import ConsolidatorReply
from prompts.render import RenderedPrompt, render
from secretary.llm.client import LlmClient
from secretary.llm.settings import LlmSettings
from secretary.llm.throttle import (
    SCOPE,
    RateLimitUnavailable,
    SharedThrottle,
    Ticket,
    shared_throttle,
)
from store.coordination.rate_limits import RateLimits
from store.db import make_engine
from tests.conftest import fresh_sqlite
from tests.helpers.openai_server import (
    CHAT_COMPLETIONS,
    ReceivedRequest,
    ScriptedOpenAIServer,
    ScriptedReply,
    chat_reply,
    error_reply,
)

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
WINDOW = 2.0  # seconds: the minute, shortened so that tests stay fast
MARGIN = 0.2
VALID = json.dumps(
    {
        "summary": "On 2024-05-01 the user moved to Lyon for a new job.",
        "importance": 6,
        "tags": ["move", "lyon", "job"],
        "source_ids": [1, 2],
    }
)


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)


class Arrivals:
    """A chat reply that notes when each request reached the server."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, _request: ReceivedRequest) -> ScriptedReply:
        with self._lock:
            self.times.append(time.monotonic())
        return chat_reply(VALID, prompt_tokens=120, completion_tokens=30)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture
def sqlite_engine(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Engine]:
    engine = fresh_sqlite(migrated_sqlite, tmp_path)
    yield engine
    engine.dispose()


@pytest.fixture
def engines(engine: Engine) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one database (SQLite, PostgreSQL): two daemons, as far as it can tell."""
    url = engine.url.render_as_string(hide_password=False)
    first, second = make_engine(url), make_engine(url)
    yield first, second
    first.dispose()
    second.dispose()


def settings_for(server: ScriptedOpenAIServer, **overrides: Any) -> LlmSettings:
    values: dict[str, Any] = {
        "model": "openai/scripted-model",
        "api_base": server.api_base,
        "api_key": "test-key",
        "timeout_seconds": 5.0,
        "max_reply_tokens": 100,
        "max_attempts": 3,
        "retry_max_seconds": 5.0,
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


def throttle_on(
    engine: Engine, holder: str, *, max_requests: int = 0, max_tokens: int = 0, **kw: Any
) -> SharedThrottle:
    limits = RateLimits(engine, window_seconds=WINDOW, margin_seconds=MARGIN)
    return SharedThrottle(
        limits, holder=holder, max_requests=max_requests, max_tokens=max_tokens, **kw
    )


def status(engine: Engine) -> Any:
    return RateLimits(engine, window_seconds=WINDOW).status(SCOPE, now=datetime.now(UTC))


def captured_logs() -> tuple[list[str], int]:
    lines: list[str] = []
    sink = logger.add(lambda line: lines.append(line.rstrip()), level="INFO", format="{message}")
    return lines, sink


# -- the throttle alone --------------------------------------------------------------------------


def test_throttle_acquire_sleeps_what_the_store_answers_and_logs_once(
    sqlite_engine: Engine,
) -> None:
    fake = FakeTime()
    throttle = SharedThrottle(
        RateLimits(sqlite_engine),
        holder="h",
        max_requests=2,
        max_tokens=0,
        clock=fake.clock,
        sleep=fake.sleep,
    )
    throttle.acquire(10)
    fake.sleep(20)
    throttle.acquire(10)
    lines, sink = captured_logs()
    try:
        ticket = throttle.acquire(10)
    finally:
        logger.remove(sink)

    assert fake.slept == [20, 40.0]  # until the first request left the window, then it went
    assert ticket.event_id is not None
    assert lines == [
        "LLM rate limit: 2 requests per 60s reached; waiting 40.0s before the next request"
    ]


def test_throttle_pause_holds_another_throttle_and_is_capped(sqlite_engine: Engine) -> None:
    fake = FakeTime()
    one, two = (
        SharedThrottle(
            RateLimits(sqlite_engine),
            holder=holder,
            max_requests=0,
            max_tokens=0,
            clock=fake.clock,
            sleep=fake.sleep,
            max_pause_seconds=30.0,
        )
        for holder in ("one", "two")
    )

    one.pause(3600.0)  # a daily quota: not waited out by every process
    two.acquire(10)

    assert fake.slept == [30.0]


def test_throttle_settle_counts_the_tokens_used(sqlite_engine: Engine) -> None:
    fake = FakeTime()
    throttle = SharedThrottle(
        RateLimits(sqlite_engine),
        holder="h",
        max_requests=0,
        max_tokens=100,
        clock=fake.clock,
        sleep=fake.sleep,
    )
    ticket = throttle.acquire(90)
    throttle.settle(ticket, 20)
    throttle.acquire(80)  # fits only because the first now counts 20

    assert fake.slept == []
    throttle.settle(Ticket(event_id=None, tokens=5), 7)  # nothing counted: nothing to do


def test_throttle_database_failure_refuses_the_call_and_sends_nothing(
    tmp_path: Path, server: ScriptedOpenAIServer
) -> None:
    empty = make_engine(f"sqlite:///{tmp_path / 'no-tables.db'}")  # no rate_limits table
    try:
        throttle = shared_throttle(empty, settings_for(server), holder="h")
        with pytest.raises(RateLimitUnavailable, match="rate limit cannot be checked"):
            throttle.acquire(10)
        client = LlmClient(settings_for(server)).with_throttle(throttle)
        with pytest.raises(RateLimitUnavailable) as caught:
            client.complete(prompt(), ConsolidatorReply)
    finally:
        empty.dispose()

    assert server.requests == []
    assert "no such table" in str(caught.value)
    assert caught.value.exit_code == 1


def test_shared_throttle_takes_the_llm_settings(sqlite_engine: Engine) -> None:
    settings = LlmSettings(max_requests_per_minute=500, max_tokens_per_minute=90_000)
    throttle = shared_throttle(sqlite_engine, settings, holder="host:1:abc")

    assert (throttle.max_requests, throttle.max_tokens) == (500, 90_000)
    assert throttle.holder == "host:1:abc"
    # Made without limits too: a provider's Retry-After must still pause every process.
    assert shared_throttle(sqlite_engine, LlmSettings(), holder="h") is not None


# -- two daemons, one model ----------------------------------------------------------------------


def test_two_clients_on_two_engines_never_exceed_the_shared_limit(
    engines: tuple[Engine, Engine], server: ScriptedOpenAIServer
) -> None:
    arrivals = Arrivals()
    server.set_default(CHAT_COMPLETIONS, arrivals)
    limit, calls_each = 3, 3
    clients = [
        LlmClient(settings_for(server), throttle_on(engine, f"daemon-{n}", max_requests=limit))
        for n, engine in enumerate(engines)
    ]
    started = time.monotonic()

    def work(client: LlmClient) -> None:
        for _ in range(calls_each):
            client.complete(prompt(), ConsolidatorReply)

    threads = [threading.Thread(target=work, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    times = sorted(arrivals.times)
    assert len(times) == 2 * calls_each
    crowded = [
        times[i : i + limit + 1]
        for i in range(len(times) - limit)
        if times[i + limit] - times[i] < WINDOW
    ]
    assert crowded == []
    # Six calls at three a window: the second three waited for the first to leave it.
    assert time.monotonic() - started >= WINDOW
    # Each answered call counts the tokens it used (120 + 30), not its reservation.
    assert status(engines[0]).tokens % 150 == 0


def test_retry_after_to_one_client_makes_the_other_wait(
    engines: tuple[Engine, Engine], server: ScriptedOpenAIServer
) -> None:
    arrivals = Arrivals()
    limited = ScriptedReply(
        status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "1"}
    )

    def first_refused(request: ReceivedRequest) -> ScriptedReply:
        arrivals(request)
        return limited

    server.enqueue(CHAT_COMPLETIONS, first_refused)
    server.set_default(CHAT_COMPLETIONS, arrivals)
    # No limits configured: the pause holds all the same.
    one, two = (
        LlmClient(settings_for(server), throttle_on(engine, f"daemon-{n}"))
        for n, engine in enumerate(engines)
    )
    worker = threading.Thread(target=one.complete, args=(prompt(), ConsolidatorReply))
    worker.start()
    deadline = time.monotonic() + 5
    while status(engines[1]).paused_until is None and time.monotonic() < deadline:
        time.sleep(0.01)

    reply = two.complete(prompt(), ConsolidatorReply)
    worker.join(10)

    assert reply.attempts == 1
    assert len(arrivals.times) == 3  # the 429, client 1's retry, client 2's call
    refused_at = arrivals.times[0]
    assert all(later - refused_at >= 0.9 for later in arrivals.times[1:])


def test_limits_of_zero_change_nothing(
    engines: tuple[Engine, Engine], server: ScriptedOpenAIServer
) -> None:
    arrivals = Arrivals()
    server.set_default(CHAT_COMPLETIONS, arrivals)
    client = LlmClient(settings_for(server)).with_throttle(throttle_on(engines[0], "daemon"))
    started = time.monotonic()

    replies = [client.complete(prompt(), ConsolidatorReply) for _ in range(6)]

    assert [reply.attempts for reply in replies] == [1] * 6
    assert len(arrivals.times) == 6
    assert time.monotonic() - started < WINDOW
    counted = status(engines[0])
    assert (counted.requests, counted.tokens, counted.paused_until) == (0, 0, None)


@pytest.mark.parametrize(
    ("status_code", "counts_prompt"), [(429, False), (500, True)], ids=["refused", "server-error"]
)
def test_failed_attempt_counts_as_a_request(
    sqlite_engine: Engine, server: ScriptedOpenAIServer, status_code: int, counts_prompt: bool
) -> None:
    server.enqueue(
        CHAT_COMPLETIONS,
        error_reply(status_code),
        chat_reply(VALID, prompt_tokens=120, completion_tokens=30),
    )
    client = LlmClient(settings_for(server), throttle_on(sqlite_engine, "d", max_requests=10))

    reply = client.complete(prompt(), ConsolidatorReply)

    counted = status(sqlite_engine)
    assert (reply.attempts, counted.requests) == (2, 2)
    # A refusal (4xx) processed nothing; a server error may have read the prompt.
    assert (counted.tokens > 150) is counts_prompt
    assert counted.tokens < 150 + 100 + 1000  # never the failed attempt's reply cap


class CountingLimits(RateLimits):
    def __init__(self, engine: Engine, window_seconds: float) -> None:
        super().__init__(engine, window_seconds=window_seconds)
        self.asked = 0
        self._count = threading.Lock()

    def reserve(self, *args: Any, **kwargs: Any) -> Any:
        with self._count:
            self.asked += 1
        return super().reserve(*args, **kwargs)


def test_threads_waiting_on_a_binding_limit_ask_the_store_in_turn(sqlite_engine: Engine) -> None:
    """A daemon's calls in flight wait for the window together: one of them asks the store at
    a time, instead of all waking when a request leaves the window and all but one being
    told to wait again (each ask is a write transaction)."""
    limits = CountingLimits(sqlite_engine, window_seconds=0.5)
    throttle = SharedThrottle(limits, holder="daemon", max_requests=3, max_tokens=0)
    calls = 12
    start = threading.Barrier(calls)
    tickets: list[Ticket] = []

    def call() -> None:
        start.wait()
        tickets.append(throttle.acquire(10))

    threads = [threading.Thread(target=call) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(tickets) == calls
    # Each call reserves once; the front of the queue is told to wait once or twice per window
    # (3 windows after the first: once, and again when the requests of one window were sent a
    # few milliseconds apart). Every waiting thread asking at each turn makes 30 or more.
    assert limits.asked < 2 * calls, limits.asked
