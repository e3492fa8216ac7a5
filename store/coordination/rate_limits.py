"""Rate limits shared by every process of the store: requests and tokens per sliding window.

A scope (``"llm"``) has one row in ``rate_limits`` and one row in ``rate_events`` per request
counted against it: when it was reserved, and its tokens (reserved, then used). ``reserve`` is
one short write transaction that first locks the scope's row (``SELECT ... FOR UPDATE`` on
PostgreSQL; on SQLite a write transaction, ``BEGIN IMMEDIATE``, locks the whole database), so
the reservations of every process and host are taken one at a time. It forgets the events that
left the window a window ago, honours a pause, and either counts the request or answers how long
until enough of the oldest events leave the window.

Every reservation counts every event before it whose time is within the window. A request
reaches the provider after its reservation (the lock, the client's own work, the connection: up
to a second for a process's first call) and before its answer, so an answered request counts from
its answer (``settle`` moves its time there) and one not yet answered counts ``margin_seconds``
longer than the window. No span of ``window_seconds`` then holds more arrivals at the provider
than the limits, by the clocks of the reservers (hosts sharing a store keep their clocks
synchronised), unless a request took longer than the margin to leave and was still unanswered a
window later. The price: a request holds its place for the window plus its own duration (with a
model answering in 5 s, a limit of 60 a minute lets some 55 through).

A request whose tokens alone exceed ``max_tokens`` is let through when the window holds no
other event (it would otherwise wait for ever); the window then holds that one request only.
The token limit holds for what was reserved: a request that used more than its reservation
counts its real tokens once settled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Select, case, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from store.db import session_factory, transaction
from store.models import RateEvent, RateLimit

LLM_SCOPE = "llm"  # the model's limit ([llm] max_requests_per_minute, max_tokens_per_minute)
PAUSED, REQUESTS, TOKENS = "paused", "requests", "tokens"
MIN_WAIT_SECONDS = 0.001  # a refusal never answers "wait 0 s": that would spin


@dataclass(frozen=True, kw_only=True)
class Reserved:
    """The request may go. ``event_id`` counts it; None when no limit is set (nothing counted)."""

    event_id: int | None


@dataclass(frozen=True, kw_only=True)
class Wait:
    """The request may not go yet: ask again in ``seconds`` (> 0); ``reason`` says which limit
    (``paused``, ``requests`` or ``tokens``)."""

    seconds: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class RateStatus:
    """A scope now: requests and tokens counted in the last window, and a pause in force."""

    requests: int
    tokens: int
    paused_until: datetime | None


class RateLimits:
    """Reads and writes ``rate_limits`` and ``rate_events``; limits of 0 mean none."""

    def __init__(
        self, engine: Engine, *, window_seconds: float = 60.0, margin_seconds: float = 0.0
    ) -> None:
        if window_seconds <= 0 or margin_seconds < 0:
            raise ValueError("a rate limit needs a positive window and a margin of 0 or more")
        self.engine = engine
        self.window = timedelta(seconds=window_seconds)
        # What a reservation counts: the window plus the margin (see the module's docstring).
        self._span = timedelta(seconds=window_seconds + margin_seconds)
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def reserve(
        self,
        scope: str,
        *,
        holder: str,
        now: datetime,
        max_requests: int,
        max_tokens: int,
        tokens: int,
    ) -> Reserved | Wait:
        """Count one request of ``tokens`` at ``now`` if the limits allow it, else say how long
        to wait. With no limit set, only a pause is checked (a read: nothing is counted)."""
        if max_requests <= 0 and max_tokens <= 0:
            with self._reads() as session:
                paused_until = session.execute(_paused(scope)).scalar_one_or_none()
            return _pause_wait(paused_until, now) or Reserved(event_id=None)
        in_window = (RateEvent.scope == scope, RateEvent.at > now - self._span)
        with transaction(self._writes) as session:
            wait = _pause_wait(_lock(session, scope, now), now)
            if wait is not None:
                return wait
            # Forget only what left the window a window ago: a reserver whose ``now`` was read
            # before ours but who comes to the lock after us still counts what it holds.
            forgotten = now - 2 * self._span
            session.execute(
                delete(RateEvent).where(RateEvent.scope == scope, RateEvent.at <= forgotten)
            )
            count, used = session.execute(
                select(
                    func.count(RateEvent.id), func.coalesce(func.sum(RateEvent.tokens), 0)
                ).where(*in_window)
            ).one()
            if _fits(int(count), int(used), max_requests, max_tokens, tokens):
                event = insert(RateEvent).values(scope=scope, at=now, tokens=tokens, holder=holder)
                event_id = session.execute(event.returning(RateEvent.id)).scalar_one()
                return Reserved(event_id=int(event_id))
            events = session.execute(
                select(RateEvent.at, RateEvent.tokens)
                .where(*in_window)
                .order_by(RateEvent.at, RateEvent.id)
            ).all()
        wait = wait_for_room(
            [(at, int(used_tokens)) for at, used_tokens in events],
            now=now,
            span=self._span,
            max_requests=max_requests,
            max_tokens=max_tokens,
            tokens=tokens,
        )
        # The aggregate said no: the rows say how long (a refusal is never "go now").
        return wait or Wait(seconds=MIN_WAIT_SECONDS, reason=REQUESTS)

    def settle(self, event_id: int, tokens: int, *, answered_at: datetime) -> None:
        """Replace a reservation's tokens with the tokens the request used, and count it from
        ``answered_at`` (when its answer, or its failure, came) if that is later."""
        later = case((RateEvent.at < answered_at, answered_at), else_=RateEvent.at)
        statement = (
            update(RateEvent).where(RateEvent.id == event_id).values(tokens=tokens, at=later)
        )
        with transaction(self._writes) as session:
            session.execute(statement)

    def pause(self, scope: str, *, until: datetime, now: datetime) -> None:
        """Refuse every reservation of ``scope`` before ``until`` (a longer pause stays)."""
        with transaction(self._writes) as session:
            paused_until = _lock(session, scope, now)
            if paused_until is None or until > paused_until:
                session.execute(
                    update(RateLimit)
                    .where(RateLimit.scope == scope)
                    .values(paused_until=until, updated_at=now)
                )

    def status(self, scope: str, *, now: datetime) -> RateStatus:
        """The requests and tokens counted in the window before ``now``, and a pause past it."""
        with self._reads() as session:
            paused_until = session.execute(_paused(scope)).scalar_one_or_none()
            count, used = session.execute(
                select(
                    func.count(RateEvent.id), func.coalesce(func.sum(RateEvent.tokens), 0)
                ).where(RateEvent.scope == scope, RateEvent.at > now - self.window)
            ).one()
        paused = paused_until if paused_until is not None and paused_until > now else None
        return RateStatus(requests=int(count), tokens=int(used), paused_until=paused)


def wait_for_room(
    events: Sequence[tuple[datetime, int]],
    *,
    now: datetime,
    span: timedelta,
    max_requests: int,
    max_tokens: int,
    tokens: int,
) -> Wait | None:
    """Given the events counted at ``now`` (oldest first, with their tokens), return how long
    until a request of ``tokens`` fits: until enough of the oldest have left the span. Return
    None if it fits now. A request over ``max_tokens`` alone fits once the span is empty."""
    count = len(events)
    leaving, reason = 0, ""
    if max_requests > 0 and count >= max_requests:
        leaving, reason = count - max_requests + 1, REQUESTS
    used = sum(event_tokens for _, event_tokens in events)
    if max_tokens > 0 and count and used + tokens > max_tokens:
        freed, gone = 0, 0
        while gone < count and used - freed + tokens > max_tokens:
            freed += events[gone][1]
            gone += 1
        if gone > leaving:
            leaving, reason = gone, TOKENS
    if leaving == 0:
        return None
    left_at = events[leaving - 1][0] + span
    return Wait(seconds=max(MIN_WAIT_SECONDS, (left_at - now).total_seconds()), reason=reason)


def _fits(count: int, used: int, max_requests: int, max_tokens: int, tokens: int) -> bool:
    if max_requests > 0 and count >= max_requests:
        return False
    # An empty window takes any request, even one over the token limit alone.
    return max_tokens <= 0 or count == 0 or used + tokens <= max_tokens


def _pause_wait(paused_until: datetime | None, now: datetime) -> Wait | None:
    if paused_until is None or paused_until <= now:
        return None
    seconds = max(MIN_WAIT_SECONDS, (paused_until - now).total_seconds())
    return Wait(seconds=seconds, reason=PAUSED)


def _paused(scope: str) -> Select[datetime | None]:
    return select(RateLimit.paused_until).where(RateLimit.scope == scope)


def _lock(session: Session, scope: str, now: datetime) -> datetime | None:
    """Lock the scope's row for the transaction (making it if missing); return its pause."""
    locked = select(RateLimit.paused_until).where(RateLimit.scope == scope).with_for_update()
    row = session.execute(locked).first()
    if row is None:
        # Two processes may both find no row: ON CONFLICT lets the second (on PostgreSQL,
        # once the first commits) find the first one's row instead of failing.
        values = {"scope": scope, "paused_until": None, "updated_at": now}
        if session.get_bind().dialect.name == "postgresql":
            session.execute(postgresql.insert(RateLimit).values(values).on_conflict_do_nothing())
        else:
            session.execute(sqlite.insert(RateLimit).values(values).on_conflict_do_nothing())
        row = session.execute(locked).one()
    paused_until: datetime | None = row.paused_until
    return paused_until
