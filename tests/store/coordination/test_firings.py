"""Claiming a firing's units: lapsed and pending units in one order (SQLite and PostgreSQL)."""

from __future__ import annotations

import contextlib
import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import event, update

from store.coordination.firings import DONE, RUNNING
from store.database import Database
from store.models import FiringUnit

T0 = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)
SHORT = timedelta(seconds=1)
LONG = timedelta(minutes=5)


def test_a_lapsed_unit_before_a_pending_one_is_claimed_first(db: Database) -> None:
    db.firings.open("linker@1", jobs=("linker",), namespaces=["x", "y"], opened_by="me", now=T0)
    dead = db.firings.claim(holder="dead", now=T0, ttl=SHORT)  # x, never renewed
    assert dead is not None

    taken = db.firings.claim(holder="live", now=T0 + 2 * SHORT, ttl=LONG)

    assert taken is not None
    assert (taken.namespace, taken.holder, taken.claims) == ("x", "live", 2)


def test_a_pending_unit_before_a_lapsed_one_is_claimed_first(db: Database) -> None:
    # "a" is busy in an earlier firing, so the second firing's first claim skips its unit for
    # "b"'s; once "a" is free, its pending unit comes before "b"'s lapsed one.
    db.firings.open("linker@1", jobs=("linker",), namespaces=["a"], opened_by="me", now=T0)
    earlier = db.firings.claim(holder="busy", now=T0, ttl=LONG)
    db.firings.open("auditor@1", jobs=("auditor",), namespaces=["a", "b"], opened_by="me", now=T0)
    skipped_to = db.firings.claim(holder="dead", now=T0, ttl=SHORT)
    assert earlier is not None
    assert skipped_to is not None
    assert skipped_to.namespace == "b"
    assert db.firings.finish(earlier.id, holder="busy", outcomes=[], now=T0 + SHORT)

    first = db.firings.claim(holder="live", now=T0 + 2 * SHORT, ttl=LONG)
    second = db.firings.claim(holder="live", now=T0 + 2 * SHORT, ttl=LONG)

    assert first is not None
    assert second is not None
    assert (first.firing.key, first.namespace, first.claims) == ("auditor@1", "a", 1)
    assert (second.firing.key, second.namespace, second.claims) == ("auditor@1", "b", 2)
    assert db.firings.claim(holder="live", now=T0 + 2 * SHORT, ttl=LONG) is None
    states = {unit.namespace: unit.state for unit in db.firings.units(first.firing.id)}
    assert states == {"a": RUNNING, "b": RUNNING}
    assert [unit.state for unit in db.firings.units(earlier.firing.id)] == [DONE]


def test_opening_a_large_firing_keeps_its_claims_in_order(db: Database) -> None:
    # At ANALYZE_UNITS units or more, opening also updates the table's statistics
    # (PostgreSQL): the claims that follow take the units in their order, as below it.
    names = [f"ns-{i:04d}" for i in range(1200)]
    db.firings.open("extractor@1", jobs=("extractor",), namespaces=names, opened_by="me", now=T0)

    taken = [db.firings.claim(holder="me", now=T0, ttl=LONG) for _ in range(3)]

    assert [unit.namespace for unit in taken if unit is not None] == names[:3]


def test_the_last_two_units_finishing_at_once_finish_their_firing(db: Database) -> None:
    # Both transactions have marked their unit done before either asks whether the firing's
    # units are all done: on PostgreSQL each saw the other's unit unfinished, and the firing
    # stayed open for good (`secretary status`: "6 of 6 namespaces done" every night after).
    firing, _ = db.firings.open(
        "linker@1", jobs=("linker",), namespaces=["x", "y"], opened_by="me", now=T0
    )
    units = [db.firings.claim(holder="me", now=T0, ttl=LONG) for _ in range(2)]
    both_marked = threading.Barrier(2, timeout=2.0)  # with the fix the second waits: it breaks

    def after(connection: object, cursor: object, statement: str, *args: object) -> None:
        if statement.startswith("UPDATE firing_units") and threading.current_thread() in threads:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_marked.wait()

    threads = [
        threading.Thread(
            target=db.firings.finish,
            args=(unit.id,),
            kwargs={"holder": "me", "outcomes": [], "now": T0},
        )
        for unit in units
        if unit is not None
    ]
    event.listen(db.engine, "after_cursor_execute", after)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        event.remove(db.engine, "after_cursor_execute", after)

    assert [unit.state for unit in db.firings.units(firing.id)] == [DONE, DONE]
    assert db.firings.open_firings() == []


def test_a_firing_left_open_with_every_unit_done_is_closed_then_forgotten(db: Database) -> None:
    # A store where that race left a firing open: the daemon's clean-up of old firings closes
    # it as of its last unit's end, and forgets it once it is old enough.
    firing, _ = db.firings.open(
        "linker@1", jobs=("linker",), namespaces=["x", "y"], opened_by="me", now=T0
    )
    db.firings.open("auditor@1", jobs=("auditor",), namespaces=["x"], opened_by="me", now=T0)
    with db.engine.begin() as connection:
        connection.execute(
            update(FiringUnit)
            .where(FiringUnit.firing_id == firing.id)
            .values(state=DONE, finished_at=T0 + SHORT)
        )

    assert db.firings.forget_finished(before=T0) == 0
    assert [f.key for f in db.firings.open_firings()] == ["auditor@1"]
    closed = db.firings.get("linker@1")
    assert closed is not None
    assert closed.finished_at == T0 + SHORT
    assert db.firings.forget_finished(before=T0 + LONG) == 1


def test_progress_counts_units_and_names_only_live_holders(db: Database) -> None:
    firing, _ = db.firings.open(
        "linker@p", jobs=("linker",), namespaces=["a", "b", "c", "d"], opened_by="me", now=T0
    )
    assert db.firings.progress(firing, now=T0).first_started_at is None
    live = db.firings.claim(holder="live", now=T0, ttl=LONG)  # a
    dead = db.firings.claim(holder="dead", now=T0 + SHORT, ttl=SHORT)  # b, never renewed
    done = db.firings.claim(holder="live", now=T0 + SHORT, ttl=LONG)  # c
    assert live is not None
    assert dead is not None
    assert done is not None
    assert db.firings.finish(done.id, holder="live", outcomes=[], now=T0 + 2 * SHORT)

    progress = db.firings.progress(firing, now=T0 + 3 * SHORT)

    # b's lease lapsed: it counts as left (another daemon may take it), held by nobody.
    assert (progress.done, progress.running, progress.left, progress.total) == (1, 1, 2, 4)
    assert progress.holders == {"live": ("a",)}
    assert progress.first_started_at == T0  # aware, as every time the store reads


def test_outcomes_are_the_units_in_their_order(db: Database) -> None:
    firing, _ = db.firings.open(
        "linker@o", jobs=("linker",), namespaces=["b", "a", "c"], opened_by="me", now=T0
    )
    # The units end out of their order; their outcomes are read in it, each unit's in its own.
    claimed = [db.firings.claim(holder="me", now=T0, ttl=LONG) for _ in range(3)]
    for unit in reversed([u for u in claimed if u is not None]):
        said = [{"job": "linker", "namespace": unit.namespace, "n": n} for n in (1, 2)]
        assert db.firings.finish(unit.id, holder="me", outcomes=said, now=T0 + SHORT)

    outcomes = db.firings.outcomes(firing.id)

    assert [(o["namespace"], o["n"]) for o in outcomes] == [
        ("b", 1),
        ("b", 2),
        ("a", 1),
        ("a", 2),
        ("c", 1),
        ("c", 2),
    ]
    assert db.firings.outcomes(firing.id + 1) == []
