"""The store's daemon lease, on SQLite and PostgreSQL: one holder, expiry, takeover, release."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from sqlalchemy import Engine, event

from store.clock import utc_now
from store.coordination.leases import Lease, LeaseHeld, LeaseKeeper, current_lease, holder_id

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


def _expiry(engine: Engine, name: str) -> datetime:
    held = current_lease(engine, name)
    assert held is not None
    return held.expires_at


def test_confirm_writes_only_once_a_third_of_the_ttl_passed(engine: Engine) -> None:
    with freeze_time(T0) as frozen:
        holder = lease(engine, "a")
        holder.acquire()
        first = _expiry(engine, holder.name)
        frozen.tick(timedelta(seconds=19))
        assert holder.confirm()
        assert _expiry(engine, holder.name) == first  # renewed 19 s ago: nothing written
        frozen.tick(timedelta(seconds=2))
        assert holder.confirm()
        assert _expiry(engine, holder.name) == first + timedelta(seconds=21)


def test_confirm_finds_a_lost_lease_once_it_may_have_been_taken(engine: Engine) -> None:
    with freeze_time(T0) as frozen:
        old = lease(engine, "old")
        old.acquire()
        frozen.tick(TTL + timedelta(seconds=1))  # its renewals did not land: it lapsed
        lease(engine, "new").acquire()
        assert old.confirm() is False


class CountingLease(Lease):
    def __init__(self, engine: Engine, holder: str, ttl: timedelta) -> None:
        super().__init__(engine, holder=holder, ttl=ttl, clock=utc_now, name=f"run:{holder}")
        self.renewals = 0

    def renew(self) -> bool:
        self.renewals += 1
        return super().renew()


class QuietKeeper(LeaseKeeper):
    def _loop(self) -> None:  # no thread renewing: the test moves the clock and asks what is due
        return


def test_keeper_renews_each_lease_when_it_is_due_not_when_another_comes(engine: Engine) -> None:
    now = [0.0]
    keeper = QuietKeeper(clock=lambda: now[0])
    early = CountingLease(engine, "early", TTL)  # due every 20 s
    early.acquire()
    keeper.keep(early)
    for second in range(1, 16):  # leases coming and going meanwhile renew nothing
        now[0] = float(second)
        other = CountingLease(engine, f"other{second}", TTL)
        keeper.keep(other)
        assert keeper.due() == []
        keeper.drop(other)
    now[0] = 20.0
    assert keeper.due() == [early]
    now[0] = 39.0
    assert keeper.due() == []
    now[0] = 40.0
    assert keeper.due() == [early]


def test_keeper_thread_keeps_a_lease_alive_and_stops_when_it_is_dropped(engine: Engine) -> None:
    keeper = LeaseKeeper()
    held = CountingLease(engine, "kept", timedelta(seconds=0.3))  # due every 0.1 s
    held.acquire()
    keeper.keep(held)
    deadline = threading.Event()
    deadline.wait(0.55)
    kept = held.renewals
    keeper.drop(held)
    deadline.wait(0.3)
    assert 2 <= kept <= 6  # due at 0.1, 0.2, ... s: 5 on an idle machine
    assert held.renewals <= kept + 1  # at most one renewal was already under way


def test_taking_a_free_lease_is_one_write_whether_its_row_is_there_or_not(engine: Engine) -> None:
    """Every run of every job takes and releases a run lease: on SQLite each write queues for
    the one writer, so taking one is a single statement (no UPDATE that finds no row first)."""
    writes: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "daemon_leases" in statement and not statement.lstrip().upper().startswith("SELECT"):
            writes.append(statement.split()[0].upper())

    event.listen(engine, "before_cursor_execute", count)
    try:
        with freeze_time(T0) as frozen:
            first = lease(engine, "a")
            first.acquire()  # no row yet
            assert writes == ["INSERT"]
            first.release()
            writes.clear()
            lease(engine, "b").acquire()  # released: no row again
            assert writes == ["INSERT"]
            writes.clear()
            frozen.tick(TTL + timedelta(seconds=1))
            lease(engine, "c").acquire()  # b's lease lapsed: its row is taken over
            assert writes == ["INSERT"]
            assert current_lease(engine).holder == "c"  # type: ignore[union-attr]
            writes.clear()
            with pytest.raises(LeaseHeld):
                lease(engine, "d").acquire()  # c's is live: refused, nothing changed
            assert current_lease(engine).holder == "c"  # type: ignore[union-attr]
    finally:
        event.remove(engine, "before_cursor_execute", count)
