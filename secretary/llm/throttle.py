"""The waiting side of the model's rate limit, shared by every daemon of the store.

Before each HTTP attempt the client asks the throttle for a ticket (``acquire``): the tokens it
may spend at most (the prompt's estimate plus the reply cap) are reserved in the database
(``store.coordination.rate_limits``), or the throttle sleeps as long as the store answers and
asks again. After the attempt the ticket is settled: the tokens actually used replace the
reservation, and the request counts from its answer (it reached the provider before). A
provider's ``Retry-After`` pauses the scope for every process (``pause``).

``shared_throttle`` always makes a throttle, limits or not: with ``[llm]
max_requests_per_minute`` and ``max_tokens_per_minute`` both 0 it counts nothing (one read per
attempt, no write) but a provider's ``Retry-After`` still pauses every daemon.

If the database cannot be asked, the call is not sent (``RateLimitUnavailable``): a limit that
silently lapsed would let every daemon flood the provider. The job's run fails and says why.
Settling and pausing are best effort: the reservation (an over-estimate) stays, and the retry
still waits its own ``Retry-After``; a log line says what was lost.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from loguru import logger

from secretary.llm.settings import LlmSettings
from store.clock import utc_now
from store.coordination.leases import holder_id
from store.coordination.rate_limits import LLM_SCOPE, PAUSED, REQUESTS, RateLimits, Reserved
from store.db import DatabaseError
from store.errors import DatabaseUnavailable

if TYPE_CHECKING:  # the engine is handed in; the secretary holds no SQL
    from sqlalchemy import Engine

SCOPE = LLM_SCOPE
WINDOW_SECONDS = 60.0  # the limits are per minute
# A request reaches the provider a little after its reservation (the row lock, litellm's own
# work, the connection): until answered, each is counted this much longer than the minute.
SEND_MARGIN_SECONDS = 0.5
# A provider asking for longer than this (a daily quota spent) is not waited out by every
# daemon: past it, calls try again, fail through their own retry bound, and runs back off.
MAX_PAUSE_SECONDS = 300.0


class RateLimitUnavailable(DatabaseUnavailable):
    """The shared rate limit could not be checked, so the call was not sent."""

    def __init__(self, cause: BaseException) -> None:
        detail = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0]
        super().__init__(
            f"the model's shared rate limit cannot be checked in the database ({detail}): the"
            " LLM call was not sent; check the database (database.url, SECRETARY_DATABASE_URL)"
        )


@dataclass(frozen=True, kw_only=True)
class Ticket:
    """A request let through: its count in the shared window (None: nothing counted), and the
    tokens reserved for it."""

    event_id: int | None
    tokens: int


class Throttle(Protocol):
    """What the client asks before and after each HTTP attempt."""

    def acquire(self, tokens: int) -> Ticket:
        """Block until a request of up to ``tokens`` may be sent; return its ticket."""
        ...

    def settle(self, ticket: Ticket, tokens: int) -> None:
        """The request was answered (or failed): count the tokens it actually used instead of
        those reserved, from now."""
        ...

    def pause(self, seconds: float) -> None:
        """Hold every request (of every process) for ``seconds``: the provider asked to."""
        ...


class SharedThrottle:
    """A ``Throttle`` over the store's ``RateLimits``, shared by every process using it.

    Safe to use from several threads at once. ``clock`` and ``sleep`` are for tests.
    """

    def __init__(
        self,
        limits: RateLimits,
        *,
        holder: str,
        max_requests: int,
        max_tokens: int,
        scope: str = SCOPE,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        max_pause_seconds: float = MAX_PAUSE_SECONDS,
    ) -> None:
        self._limits = limits
        self.holder = holder
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.scope = scope
        self._clock = clock
        self._sleep = sleep
        self._max_pause = max_pause_seconds
        # The threads of one process ask the store in turn: while one waits for the window,
        # the others queue here. Otherwise every waiting call (16 or more in flight) would
        # wake when the oldest request leaves the window, all but one would be told to wait
        # again, and a limit that binds would cost a database write per call per grant.
        self._turn = threading.Lock()

    def acquire(self, tokens: int) -> Ticket:
        """Block until the shared limits let a request of ``tokens`` go; return its ticket.

        Raise RateLimitUnavailable if the database cannot be asked.
        """
        with self._turn:
            return self._acquire(tokens)

    def _acquire(self, tokens: int) -> Ticket:
        waited = 0.0
        while True:
            try:
                answer = self._limits.reserve(
                    self.scope,
                    holder=self.holder,
                    now=self._clock(),
                    max_requests=self.max_requests,
                    max_tokens=self.max_tokens,
                    tokens=tokens,
                )
            except DatabaseError as exc:
                raise RateLimitUnavailable(exc) from exc
            if isinstance(answer, Reserved):
                if waited:
                    logger.debug("LLM rate limit: went after waiting {:.1f}s", waited)
                return Ticket(event_id=answer.event_id, tokens=tokens)
            if not waited:
                logger.info(
                    "LLM rate limit: {}; waiting {:.1f}s before the next request",
                    self._why(answer.reason),
                    answer.seconds,
                )
            waited += answer.seconds
            self._sleep(answer.seconds)

    def settle(self, ticket: Ticket, tokens: int) -> None:
        """Count ``tokens`` for the ticket's request, answered now; a database failure keeps
        the reservation."""
        if ticket.event_id is None:
            return
        try:
            self._limits.settle(ticket.event_id, tokens, answered_at=self._clock())
        except DatabaseError as exc:
            logger.warning(
                "LLM rate limit: could not count {} tokens used instead of the {} reserved: {}",
                tokens,
                ticket.tokens,
                exc,
            )

    def pause(self, seconds: float) -> None:
        """Hold every process's requests for ``seconds`` (at most ``max_pause_seconds``)."""
        held = min(max(seconds, 0.0), self._max_pause)
        if held <= 0:
            return
        now = self._clock()
        try:
            self._limits.pause(self.scope, until=now + timedelta(seconds=held), now=now)
        except DatabaseError as exc:
            logger.warning("LLM rate limit: could not pause the other processes: {}", exc)
            return
        logger.info("LLM rate limit: the provider asked to wait; every process waits {:.1f}s", held)

    def _why(self, reason: str) -> str:
        window = f"{self._limits.window.total_seconds():g}s"
        if reason == PAUSED:
            return "the provider asked to wait (Retry-After)"
        if reason == REQUESTS:
            return f"{self.max_requests} requests per {window} reached"
        return f"{self.max_tokens} tokens per {window} reached"


def shared_throttle(engine: Engine, settings: LlmSettings, *, holder: str) -> SharedThrottle:
    """The throttle of the store behind ``engine`` under the ``[llm]`` limits, for ``holder``
    (a process, e.g. ``store.coordination.leases.holder_id()``).

    Made even with no limit set: a provider's Retry-After must still pause every process.
    """
    limits = RateLimits(engine, window_seconds=WINDOW_SECONDS, margin_seconds=SEND_MARGIN_SECONDS)
    return SharedThrottle(
        limits,
        holder=holder,
        max_requests=settings.max_requests_per_minute,
        max_tokens=settings.max_tokens_per_minute,
    )


_PROCESS_HOLDER = holder_id()  # this process, as the rate events name it
_MADE: weakref.WeakKeyDictionary[Engine, dict[tuple[int, int], SharedThrottle]] = (
    weakref.WeakKeyDictionary()
)
_MADE_LOCK = threading.Lock()


def process_throttle(engine: Engine, settings: LlmSettings) -> SharedThrottle:
    """This process's throttle for the store behind ``engine`` under the ``[llm]`` limits: made
    once per engine and limits, so that every run of the process names the same holder."""
    limits = (settings.max_requests_per_minute, settings.max_tokens_per_minute)
    with _MADE_LOCK:
        made = _MADE.setdefault(engine, {})
        if limits not in made:
            made[limits] = shared_throttle(engine, settings, holder=_PROCESS_HOLDER)
        return made[limits]
