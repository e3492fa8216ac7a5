"""The store's daemon lease, on SQLite and PostgreSQL: one holder, expiry, takeover, release."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from sqlalchemy import Engine

from store.clock import utc_now
from store.coordination.leases import Lease, LeaseHeld, current_lease, holder_id

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)


def lease(engine: Engine, holder: str) -> Lease:
    return Lease(engine, holder=holder, ttl=TTL, clock=utc_now)


def test_holder_id_names_host_pid_and_a_unique_part() -> None:
    first, second = holder_id(), holder_id()
    assert first.count(":") >= 2
    assert first != second


def test_lease_second_holder_refused_with_clear_message(engine: Engine) -> None:
    with freeze_time(T0):
        lease(engine, "host-a:1:x").acquire()
        with pytest.raises(LeaseHeld) as refused:
            lease(engine, "host-b:2:y").acquire()
    message = str(refused.value)
    assert "another secretary daemon is already running on this store" in message
    assert "host-a:1:x" in message
    assert "2026-03-04T12:01:00+00:00" in message
    assert refused.value.exit_code == 75


def test_lease_expired_is_taken_over_and_old_holder_cannot_renew(engine: Engine) -> None:
    with freeze_time(T0) as frozen:
        old = lease(engine, "old")
        old.acquire()
        frozen.tick(TTL + timedelta(seconds=1))
        new = lease(engine, "new")
        new.acquire()
        assert current_lease(engine).holder == "new"  # type: ignore[union-attr]
        assert old.renew() is False
        old.release()  # only releases its own lease: the new holder keeps it
        assert current_lease(engine).holder == "new"  # type: ignore[union-attr]


def test_lease_renewed_stays_held(engine: Engine) -> None:
    with freeze_time(T0) as frozen:
        holder = lease(engine, "a")
        holder.acquire()
        frozen.tick(timedelta(seconds=50))
        assert holder.renew()
        frozen.tick(timedelta(seconds=50))  # 100 s after acquiring, 50 s after renewing
        with pytest.raises(LeaseHeld):
            lease(engine, "b").acquire()
        assert not holder.expired()


def test_lease_released_on_close_lets_the_next_start_at_once(engine: Engine) -> None:
    with freeze_time(T0):
        with lease(engine, "a"):
            assert current_lease(engine) is not None
        assert current_lease(engine) is None
        lease(engine, "b").acquire()


def test_lease_same_holder_acquires_again(engine: Engine) -> None:
    with freeze_time(T0):
        holder = lease(engine, "a")
        holder.acquire()
        holder.acquire()
        assert current_lease(engine).holder == "a"  # type: ignore[union-attr]


def test_lease_concurrent_acquire_exactly_one_wins(engine: Engine) -> None:
    contenders = 6
    start = threading.Barrier(contenders)
    won: list[str] = []
    refused: list[str] = []

    def contend(name: str) -> None:
        start.wait()
        try:
            Lease(engine, holder=name, ttl=TTL).acquire()
        except LeaseHeld:
            refused.append(name)
        else:
            won.append(name)

    threads = [threading.Thread(target=contend, args=(f"h{i}",)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(won) == 1
    assert len(refused) == contenders - 1
    assert current_lease(engine).holder == won[0]  # type: ignore[union-attr]
