"""The shared rate limit, on SQLite and PostgreSQL: windows, waits, pauses, settling, races."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select

from store.clock import utc_now
from store.coordination.rate_limits import (
    PAUSED,
    REQUESTS,
    TOKENS,
    RateLimits,
    RateStatus,
    Reserved,
    Wait,
    wait_for_room,
)
from store.db import make_engine
from store.models import RateEvent
from tests.conftest import REPO

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
SCOPE = "llm"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture
def other_engine(engine: Engine) -> Iterator[Engine]:
    """A second engine on the same database: another process, as far as the store can tell."""
    other = make_engine(url_of(engine))
    yield other
    other.dispose()


def reserve(
    limits: RateLimits,
    now: datetime,
    *,
    tokens: int = 10,
    max_requests: int = 0,
    max_tokens: int = 0,
    holder: str = "h",
) -> Reserved | Wait:
    return limits.reserve(
        SCOPE,
        holder=holder,
        now=now,
        max_requests=max_requests,
        max_tokens=max_tokens,
        tokens=tokens,
    )


def events(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count(RateEvent.id))).scalar_one())


def test_rate_limits_requests_full_window_waits_until_the_oldest_leaves(engine: Engine) -> None:
    limits = RateLimits(engine)
    for second in (0, 10, 20):
        assert isinstance(reserve(limits, at(second), max_requests=3), Reserved)

    assert reserve(limits, at(30), max_requests=3) == Wait(seconds=30.0, reason=REQUESTS)
    # The event of 0 s is out of the window at 60 s exactly: (now - 60 s, now] holds two.
    assert isinstance(reserve(limits, at(60), max_requests=3), Reserved)
    assert reserve(limits, at(61), max_requests=3) == Wait(seconds=9.0, reason=REQUESTS)


@pytest.mark.parametrize(
    ("asked", "seconds"),
    [(10, 0.0), (60, 40.0), (70, 50.0)],
    ids=["fits", "first-leaves", "both-leave"],
)
def test_rate_limits_tokens_wait_until_enough_tokens_leave(
    engine: Engine, asked: int, seconds: float
) -> None:
    limits = RateLimits(engine)
    reserve(limits, at(0), tokens=50, max_tokens=100)
    reserve(limits, at(10), tokens=40, max_tokens=100)

    answer = reserve(limits, at(20), tokens=asked, max_tokens=100)

    if seconds:
        assert answer == Wait(seconds=seconds, reason=TOKENS)
    else:
        assert isinstance(answer, Reserved)


def test_rate_limits_the_longer_of_both_waits_is_answered(engine: Engine) -> None:
    limits = RateLimits(engine)
    reserve(limits, at(0), tokens=90, max_requests=2, max_tokens=100)
    reserve(limits, at(10), tokens=5, max_requests=2, max_tokens=100)

    # Requests: one must leave (at 60 s); tokens: 95 + 10 > 100 also needs only the first.
    assert reserve(limits, at(20), max_requests=2, max_tokens=100) == Wait(
        seconds=40.0, reason=REQUESTS
    )
    # With room for requests, tokens alone decide.
    assert reserve(limits, at(20), tokens=99, max_requests=5, max_tokens=100) == Wait(
        seconds=50.0, reason=TOKENS
    )


def test_rate_limits_request_over_the_token_limit_goes_alone(engine: Engine) -> None:
    limits = RateLimits(engine)
    assert isinstance(reserve(limits, at(0), tokens=500, max_tokens=100), Reserved)

    # Nothing else fits beside it, and a second big one waits for the window to empty.
    assert reserve(limits, at(1), tokens=1, max_tokens=100) == Wait(seconds=59.0, reason=TOKENS)
    assert reserve(limits, at(30), tokens=500, max_tokens=100) == Wait(seconds=30.0, reason=TOKENS)
    assert isinstance(reserve(limits, at(60), tokens=500, max_tokens=100), Reserved)


def test_rate_limits_settle_changes_the_tokens_counted(engine: Engine) -> None:
    limits = RateLimits(engine)
    first = reserve(limits, at(0), tokens=80, max_tokens=100)
    assert isinstance(first, Reserved)
    assert first.event_id is not None
    assert isinstance(reserve(limits, at(1), tokens=30, max_tokens=100), Wait)

    limits.settle(first.event_id, 10, answered_at=at(0.5))

    assert isinstance(reserve(limits, at(2), tokens=30, max_tokens=100), Reserved)
    assert limits.status(SCOPE, now=at(3)) == RateStatus(requests=2, tokens=40, paused_until=None)


def test_rate_limits_settled_request_counts_from_its_answer(engine: Engine) -> None:
    limits = RateLimits(engine)
    first = reserve(limits, at(0), max_requests=1)
    assert isinstance(first, Reserved)
    assert first.event_id is not None

    # It reached the provider some time before its answer came at 5 s: a window from then.
    limits.settle(first.event_id, 10, answered_at=at(5))
    assert reserve(limits, at(60), max_requests=1) == Wait(seconds=5.0, reason=REQUESTS)
    # An answer time before the reservation's (another host's clock) never moves it back.
    limits.settle(first.event_id, 10, answered_at=at(-30))
    assert reserve(limits, at(64), max_requests=1) == Wait(seconds=1.0, reason=REQUESTS)
    assert isinstance(reserve(limits, at(65), max_requests=1), Reserved)


def test_rate_limits_pause_is_shared_and_never_shortened(
    engine: Engine, other_engine: Engine
) -> None:
    RateLimits(engine).pause(SCOPE, until=at(30), now=at(0))
    other = RateLimits(other_engine)
    other.pause(SCOPE, until=at(10), now=at(1))  # shorter: the longer pause stays

    assert reserve(other, at(5), max_requests=10) == Wait(seconds=25.0, reason=PAUSED)
    # Even with no limit set, a pause holds.
    assert reserve(other, at(5)) == Wait(seconds=25.0, reason=PAUSED)
    assert other.status(SCOPE, now=at(5)).paused_until == at(30)
    assert isinstance(reserve(other, at(30), max_requests=10), Reserved)
    assert other.status(SCOPE, now=at(31)).paused_until is None


def test_rate_limits_no_limit_counts_nothing(engine: Engine) -> None:
    limits = RateLimits(engine)

    assert reserve(limits, at(0)) == Reserved(event_id=None)
    assert events(engine) == 0
    assert limits.status(SCOPE, now=at(0)) == RateStatus(requests=0, tokens=0, paused_until=None)


def test_rate_limits_old_events_are_deleted_and_scopes_apart(engine: Engine) -> None:
    limits = RateLimits(engine)
    reserve(limits, at(0), max_requests=1)
    assert isinstance(
        limits.reserve("other", holder="h", now=at(1), max_requests=1, max_tokens=0, tokens=1),
        Reserved,
    )
    reserve(limits, at(100), max_requests=1)
    assert events(engine) == 3  # the first left the window, but not a window ago: kept
    reserve(limits, at(130), max_requests=2)

    assert events(engine) == 3  # the first was forgotten at 120 s; "other" stays
    assert limits.status(SCOPE, now=at(130)).requests == 2


def test_rate_limits_a_reserver_that_read_its_clock_earlier_still_counts_the_window(
    engine: Engine, other_engine: Engine
) -> None:
    # Two requests at 0 s; then a reserver at 1.05 s, and one that read its clock at 0.9 s but
    # came to the lock after it (it waited for the lock): the window [0, 1) must not see three.
    limits, late = (
        RateLimits(engine, window_seconds=1.0),
        RateLimits(other_engine, window_seconds=1.0),
    )
    assert isinstance(reserve(limits, at(0), max_requests=2), Reserved)
    assert isinstance(reserve(limits, at(0.01), max_requests=2), Reserved)
    assert isinstance(reserve(limits, at(1.05), max_requests=2), Reserved)

    assert isinstance(reserve(late, at(0.9), max_requests=2), Wait)
    assert events(engine) == 3


def test_rate_limits_margin_counts_each_event_longer(engine: Engine) -> None:
    limits = RateLimits(engine, window_seconds=60.0, margin_seconds=0.5)
    reserve(limits, at(0), max_requests=1)

    assert reserve(limits, at(60), max_requests=1) == Wait(seconds=0.5, reason=REQUESTS)
    assert isinstance(reserve(limits, at(60.5), max_requests=1), Reserved)


def test_wait_for_room_refusal_never_answers_zero() -> None:
    wait = wait_for_room(
        [(at(0), 1)], now=at(60), span=timedelta(seconds=60), max_requests=1, max_tokens=0, tokens=1
    )
    assert wait is not None
    assert wait.seconds > 0


def test_rate_limits_concurrent_reservers_at_one_instant_take_exactly_the_limit(
    engine: Engine,
) -> None:
    contenders, allowed = 8, 3
    start = threading.Barrier(contenders)
    answers: list[Reserved | Wait] = []

    def contend(number: int) -> None:
        own = make_engine(url_of(engine))
        try:
            start.wait()
            answer = reserve(
                RateLimits(own), at(0), tokens=30, max_requests=allowed, holder=f"h{number}"
            )
            answers.append(answer)
        finally:
            own.dispose()

    run_threads(contend, contenders)

    assert len(answers) == contenders
    assert sum(isinstance(answer, Reserved) for answer in answers) == allowed
    assert events(engine) == allowed


def test_rate_limits_concurrent_reservers_for_tokens_take_what_fits(engine: Engine) -> None:
    contenders = 8
    start = threading.Barrier(contenders)
    answers: list[Reserved | Wait] = []

    def contend(number: int) -> None:
        own = make_engine(url_of(engine))
        try:
            start.wait()
            answers.append(
                reserve(RateLimits(own), at(0), tokens=30, max_tokens=100, holder=f"h{number}")
            )
        finally:
            own.dispose()

    run_threads(contend, contenders)

    assert sum(isinstance(answer, Reserved) for answer in answers) == 3
    assert all(answer.reason == TOKENS for answer in answers if isinstance(answer, Wait))


def test_rate_limits_concurrent_reservers_over_time_never_exceed_the_window(
    engine: Engine,
) -> None:
    # Real time, a short window: four "processes" each send three requests as soon as allowed.
    window, limit, threads, each = 0.4, 3, 4, 3
    stamps: list[datetime] = []
    lock = threading.Lock()

    def send(number: int) -> None:
        own = make_engine(url_of(engine))
        limits = RateLimits(own, window_seconds=window)
        try:
            for _ in range(each):
                while True:
                    now = utc_now()
                    answer = reserve(limits, now, max_requests=limit, holder=f"h{number}")
                    if isinstance(answer, Reserved):
                        with lock:
                            stamps.append(now)
                        break
                    assert answer.seconds > 0
                    time.sleep(answer.seconds)
        finally:
            own.dispose()

    run_threads(send, threads)

    assert len(stamps) == threads * each
    assert_never_over(sorted(stamps), limit, timedelta(seconds=window))


def test_rate_limits_two_processes_share_the_window(engine: Engine) -> None:
    window, limit, each = 0.5, 3, 4
    child = CHILD.format(url=url_of(engine), window=window, limit=limit, each=each)
    processes = [
        subprocess.Popen([sys.executable, "-c", child], cwd=REPO, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=60)[0] for process in processes]

    assert [process.returncode for process in processes] == [0, 0]
    stamps = sorted(datetime.fromisoformat(s) for out in outputs for s in json.loads(out))
    assert len(stamps) == 2 * each
    assert_never_over(stamps, limit, timedelta(seconds=window))


CHILD = """
import json, os, time
from store.clock import utc_now
from store.coordination.rate_limits import RateLimits, Reserved
from store.db import make_engine

limits = RateLimits(make_engine({url!r}), window_seconds={window})
stamps = []
while len(stamps) < {each}:
    now = utc_now()
    answer = limits.reserve(
        "llm", holder=str(os.getpid()), now=now, max_requests={limit}, max_tokens=0, tokens=1
    )
    if isinstance(answer, Reserved):
        stamps.append(now.isoformat())
    else:
        time.sleep(answer.seconds)
print(json.dumps(stamps))
"""


def run_threads(target: Callable[[int], None], count: int) -> None:
    errors: list[BaseException] = []

    def guarded(number: int) -> None:
        try:
            target(number)
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=guarded, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []


def assert_never_over(stamps: list[datetime], limit: int, window: timedelta) -> None:
    """No span of ``window`` holds more than ``limit`` of the (sorted) stamps."""
    crowded = [
        (stamps[i], stamps[i + limit])
        for i in range(len(stamps) - limit)
        if stamps[i + limit] - stamps[i] < window
    ]
    assert crowded == []
