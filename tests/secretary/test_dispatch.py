"""The dispatcher: firings and dream requests cut into units (one per namespace) that run up to
``[jobs] concurrency`` at once, one unit per namespace at a time and in the order of their
firings, shared by several dispatchers (daemons) over one database; a unit whose daemon died is
taken over once its lease lapses. Fake jobs (tests/helpers/blocking_calls.py) block until the
test releases them; the firings are real rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from loguru import logger
from sqlalchemy.exc import OperationalError

from secretary import dispatch
from secretary.config import Settings
from secretary.dispatch import Dispatcher, firing_key
from secretary.jobs.registry import JOB_NAMES
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.firings import DONE, PENDING, Firings, UnitView
from store.database import Database
from store.errors import SecretaryError
from tests.helpers.blocking_calls import WAIT, BlockingCalls
from tests.helpers.db_faults import cut

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
QUIET = 1.0  # seconds a run that must not start is given to start anyway


def settings(concurrency: int = 4, lease_seconds: float = 60.0) -> Settings:
    return Settings.model_validate(
        {"jobs": {"concurrency": concurrency}, "schedule": {"lease_seconds": lease_seconds}}
    )


@pytest.fixture
def dispatchers(db: Database) -> Iterator[list[Dispatcher]]:
    """Every dispatcher a test makes, stopped (and its units waited for) at the end."""
    made: list[Dispatcher] = []
    yield made
    for dispatcher in made:
        dispatcher.stop()
    for dispatcher in made:
        dispatcher.wait_idle(WAIT)


def make(
    db: Database,
    made: list[Dispatcher],
    calls: BlockingCalls,
    *,
    holder: str = "daemon-a",
    concurrency: int = 4,
    lease_seconds: float = 60.0,
) -> Dispatcher:
    dispatcher = Dispatcher(
        calls,
        db.firings,
        settings=settings(concurrency, lease_seconds),
        holder=holder,
    )
    made.append(dispatcher)
    return dispatcher


def in_thread(target: object, *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def dream_request(
    request_id: int = 1,
    namespace: str | None = "maya",
    jobs: tuple[str, ...] = (),
    retry_quarantined: bool = False,
) -> DreamRequestView:
    return DreamRequestView(
        id=request_id,
        namespace=namespace,
        jobs=jobs,
        retry_quarantined=retry_quarantined,
        requested_by="test",
        requested_at=T0,
        status="running",
        picked_by=None,
        started_at=T0,
        finished_at=None,
        outcomes=(),
        error=None,
    )


# -- one dispatcher ------------------------------------------------------------------------------


def test_same_namespace_runs_never_overlap_and_keep_the_firings_order(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"])
    dispatcher = make(db, dispatchers, calls)
    linker = in_thread(dispatcher.fire, "linker")
    assert calls.entered["linker", "maya"].wait(WAIT)
    auditor = in_thread(dispatcher.fire, "auditor")
    time.sleep(QUIET)
    assert not calls.entered["auditor", "maya"].is_set()  # queued behind the linker on "maya"
    calls.release["linker", "maya"].set()
    assert calls.entered["auditor", "maya"].wait(WAIT)
    calls.release["auditor", "maya"].set()
    linker.join(WAIT)
    auditor.join(WAIT)
    assert calls.overlaps == []
    assert calls.log == [
        ("start", "linker", "maya"),
        ("end", "linker", "maya"),
        ("start", "auditor", "maya"),
        ("end", "auditor", "maya"),
    ]
    assert dispatcher.wait_idle(WAIT)


def test_namespaces_run_at_once_up_to_the_concurrency(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    names = [f"user-{i}" for i in range(7)]
    calls = BlockingCalls(names)
    dispatcher = make(db, dispatchers, calls, concurrency=3)
    firing = in_thread(dispatcher.fire, "linker")
    for name in names[:3]:
        assert calls.entered["linker", name].wait(WAIT)
    time.sleep(QUIET)
    assert calls.at_once == 3  # three run, the other four wait for a slot
    assert len(dispatcher.held()) == 3
    calls.release_all(["linker"])
    firing.join(WAIT)
    assert not firing.is_alive()
    assert sorted(calls.ran("linker")) == names  # each once
    assert calls.most_at_once == 3
    assert calls.manual == [False] * 7  # a scheduled firing backs off after failures


def test_stop_claims_nothing_more_and_waits_for_the_running_run(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"])
    dispatcher = make(db, dispatchers, calls)
    linker = in_thread(dispatcher.fire, "linker")
    assert calls.entered["linker", "maya"].wait(WAIT)
    due = utc_now()  # the firing's minute, fixed: the test may cross a minute's end
    auditor = in_thread(lambda: dispatcher.fire("auditor", at=due))
    time.sleep(QUIET)
    dispatcher.stop()
    auditor.join(WAIT)
    assert not auditor.is_alive()  # its opener stops waiting
    assert dispatcher.running() == ["linker for maya"]
    assert not dispatcher.wait_idle(0)
    calls.release["linker", "maya"].set()
    assert dispatcher.wait_idle(WAIT)
    linker.join(WAIT)
    assert not calls.entered["auditor", "maya"].is_set()  # left for the next daemon
    auditor_firing = db.firings.get(firing_key("auditor", due))
    assert auditor_firing is not None
    assert auditor_firing.finished_at is None
    assert [unit.state for unit in db.firings.units(auditor_firing.id)] == [PENDING]
    dispatcher.fire("retention")  # after stop nothing new starts
    assert "maya" not in calls.ran("retention")


def test_a_failure_on_one_namespace_lets_the_next_run(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["broken", "fine"], fail=["broken"])
    statuses: list[str] = []
    dispatcher = Dispatcher(
        calls, db.firings, settings=settings(1), holder="a", on_status=statuses.append
    )
    dispatchers.append(dispatcher)
    calls.release["linker", "fine"].set()
    due = utc_now()  # the firing's minute, fixed: the test may cross a minute's end
    dispatcher.fire("linker", at=due)
    assert [entry for entry in calls.log if entry[0] == "end"] == [
        ("end", "linker", "broken"),
        ("end", "linker", "fine"),
    ]
    assert statuses == ["running linker for broken", "idle", "running linker for fine", "idle"]
    firing = db.firings.get(firing_key("linker", due))
    assert firing is not None
    assert firing.finished_at is not None
    outcomes = [o for unit in db.firings.units(firing.id) for o in unit.outcomes]
    assert [(o["namespace"], o["status"]) for o in outcomes] == [
        ("broken", "failed"),
        ("fine", "applied"),
    ]


def test_the_database_down_skips_the_firing(db: Database, dispatchers: list[Dispatcher]) -> None:
    class Down(BlockingCalls):
        def namespaces(self, job: str) -> list[str]:
            raise OperationalError("SELECT", {}, Exception("connection refused"))

    calls = Down(["maya"])
    dispatcher = make(db, dispatchers, calls)
    dispatcher.fire("linker")
    assert calls.log == []
    assert dispatcher.wait_idle(0)
    assert db.firings.open_firings() == []


def test_claims_failing_while_the_database_is_down_warn_once_and_say_when_they_work(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    # The claim loop polls every half second: an outage of minutes must not write two
    # warnings a second with the statement in each (a daemon's journal during a restart).
    class FlakyFirings(Firings):
        failures = 4

        def claim(self, **values: Any) -> UnitView | None:
            if self.failures:
                self.failures -= 1
                raise OperationalError("SELECT", {}, Exception("connection refused"))
            return super().claim(**values)

    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.strip()), format="{level} {message}")
    calls = BlockingCalls(["maya"])
    calls.release_all(JOB_NAMES)
    dispatcher = Dispatcher(calls, FlakyFirings(db.engine), settings=settings(), holder="daemon-a")
    dispatchers.append(dispatcher)
    try:
        outcomes = dispatcher.dream(dream_request(namespace="maya"))
    finally:
        logger.remove(sink)

    assert outcomes is not None
    assert {o["job"] for o in outcomes} == set(JOB_NAMES)
    claiming = [line for line in lines if "cannot claim work" in line]
    assert [line.split()[0] for line in claiming] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "INFO"]
    assert "cannot claim work, trying again: works again after 4 failures" in claiming[-1]


def test_a_dream_request_outlives_its_outcomes_unreadable_for_a_while(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    # Its units ran and committed; the database cut while the opener reads their outcomes (its
    # progress, then the end) must not fail the request, whose work is done.
    class CutFirings(Firings):
        cuts = 4

        def outcomes(self, firing_id: int) -> list[dict[str, Any]]:
            if self.cuts:
                self.cuts -= 1
                cut(self.engine)
            return super().outcomes(firing_id)

    calls = BlockingCalls(["maya"])
    calls.release_all(JOB_NAMES)
    firings = CutFirings(db.engine)
    dispatcher = Dispatcher(calls, firings, settings=settings(), holder="daemon-a")
    dispatchers.append(dispatcher)

    outcomes = dispatcher.dream(dream_request(namespace="maya"))

    assert firings.cuts == 0
    assert outcomes is not None
    assert [(o["job"], o["status"]) for o in outcomes] == [(job, "applied") for job in JOB_NAMES]


# -- dream requests ------------------------------------------------------------------------------


def test_dream_runs_every_job_in_order_on_each_namespace(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya", "sam"])
    calls.release_all(JOB_NAMES)
    dispatcher = make(db, dispatchers, calls)

    outcomes = dispatcher.dream(dream_request(namespace=None, retry_quarantined=True))

    assert outcomes is not None
    assert [(o["namespace"], o["job"]) for o in outcomes] == [
        (namespace, job) for namespace in ("maya", "sam") for job in JOB_NAMES
    ]
    for namespace in ("maya", "sam"):
        started = [job for event, job, ns in calls.log if event == "start" and ns == namespace]
        assert started == list(JOB_NAMES)
    assert {o["status"] for o in outcomes} == {"applied"}
    assert set(outcomes[0]) == {"job", "namespace", "status", "record_id", "records", "message"}
    assert set(calls.retried) == {True}
    assert set(calls.manual) == {True}  # asked for: it runs through a back-off
    assert calls.progressed[-1] == len(outcomes)
    assert dispatcher.wait_idle(WAIT)


def test_a_slow_progress_store_is_made_less_often(
    db: Database, dispatchers: list[Dispatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Storing a request's outcomes so far reads and writes all of them, which takes longer as
    # the night grows: each store is followed by PROGRESS_PAUSE times as long without one. The
    # outcomes at the end are stored however soon after the last.
    monkeypatch.setattr(dispatch, "PROGRESS_SECONDS", 0.0)
    cost = 0.2

    class SlowProgress(BlockingCalls):
        def __init__(self, namespaces: list[str]) -> None:
            super().__init__(namespaces)
            self.stored_at: list[float] = []

        def progress(self, request: DreamRequestView, outcomes: Any) -> None:
            self.stored_at.append(time.monotonic())
            time.sleep(cost)
            super().progress(request, outcomes)

    names = [f"ns{i}" for i in range(8)]
    calls = SlowProgress(names)
    dispatcher = make(db, dispatchers, calls, concurrency=1)

    def release_one_by_one() -> None:
        for name in names:
            time.sleep(0.3)
            calls.release["linker", name].set()

    in_thread(release_one_by_one)
    outcomes = dispatcher.dream(dream_request(namespace=None, jobs=("linker",)))

    assert outcomes is not None
    assert len(outcomes) == len(names)
    assert calls.progressed[-1] == len(names)  # the end, stored
    between = [b - a for a, b in zip(calls.stored_at[:-2], calls.stored_at[1:-1], strict=True)]
    assert all(gap >= dispatch.PROGRESS_PAUSE * cost for gap in between), calls.stored_at
    assert len(calls.stored_at) <= 3, calls.stored_at  # of 8 units ending 0.3 s apart


def test_dream_waits_for_a_firing_on_the_same_namespace(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"])
    dispatcher = make(db, dispatchers, calls)
    firing = in_thread(dispatcher.fire, "linker")
    assert calls.entered["linker", "maya"].wait(WAIT)
    result: list[list[dict[str, object]] | None] = []
    request = in_thread(lambda: result.append(dispatcher.dream(dream_request(jobs=("auditor",)))))
    time.sleep(QUIET)
    assert not calls.entered["auditor", "maya"].is_set()
    calls.release["linker", "maya"].set()
    calls.release["auditor", "maya"].set()
    request.join(WAIT)
    firing.join(WAIT)
    assert calls.overlaps == []
    assert [entry[1] for entry in calls.log] == ["linker", "linker", "auditor", "auditor"]
    assert result[0] is not None
    assert [o["job"] for o in result[0]] == ["auditor"]


def test_dream_stopped_midway_returns_none_and_gives_the_unit_back(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"])
    dispatcher = make(db, dispatchers, calls)
    result: list[list[dict[str, object]] | None] = []
    request = in_thread(
        lambda: result.append(dispatcher.dream(dream_request(jobs=("linker", "auditor"))))
    )
    assert calls.entered["linker", "maya"].wait(WAIT)
    dispatcher.stop()
    calls.release["linker", "maya"].set()
    request.join(WAIT)
    assert result == [None]  # the auditor never ran: the request is left for the next daemon
    assert dispatcher.wait_idle(WAIT)
    assert not calls.entered["auditor", "maya"].is_set()
    firing = db.firings.get("dream:1")
    assert firing is not None
    assert [unit.state for unit in db.firings.units(firing.id)] == [PENDING]
    assert dispatcher.dream(dream_request()) is None


def test_dream_unknown_job_fails_before_anything_runs(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"])
    dispatcher = make(db, dispatchers, calls)
    with pytest.raises(SecretaryError, match="unknown job 'dreamer'"):
        dispatcher.dream(dream_request(jobs=("auditor", "dreamer")))
    assert calls.log == []
    assert db.firings.open_firings() == []


def test_dream_a_run_that_escapes_is_a_failed_outcome(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya"], fail=["maya"])
    dispatcher = make(db, dispatchers, calls)
    outcomes = dispatcher.dream(dream_request(jobs=("linker",)))
    assert outcomes is not None
    assert [(o["status"], o["message"]) for o in outcomes] == [
        ("failed", "SecretaryError: linker broke on maya")
    ]


# -- several daemons ------------------------------------------------------------------------------


def running(calls: BlockingCalls, count: int) -> None:
    """Wait until ``count`` runs are under way at once."""
    deadline = time.monotonic() + WAIT
    while calls.at_once < count:
        assert time.monotonic() < deadline, f"{calls.at_once} runs under way, not {count}"
        time.sleep(0.01)


def test_two_daemons_fire_once_and_run_every_unit_exactly_once(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    names = [f"user-{i:02}" for i in range(24)]
    calls = BlockingCalls(names)  # one set of jobs: a run on any daemon is counted here
    first = make(db, dispatchers, calls, holder="daemon-a", concurrency=3)
    second = make(db, dispatchers, calls, holder="daemon-b", concurrency=3)
    at = datetime(2026, 3, 4, 2, 0, 7, tzinfo=UTC)  # both fire at 02:00, seconds apart
    threads = [in_thread(lambda: first.fire("linker", at=at))]
    running(calls, 3)  # the first daemon holds three units, which wait...
    threads.append(in_thread(lambda: second.fire("linker", at=at + timedelta(seconds=40))))
    running(calls, 6)  # ...until the second holds three more: however loaded the machine
    calls.release_all(["linker"])
    for thread in threads:
        thread.join(WAIT * 3)
        assert not thread.is_alive()
    assert sorted(calls.ran("linker")) == names  # every unit once, none twice
    assert calls.overlaps == []
    firings = [db.firings.get(firing_key("linker", at))]
    assert firings[0] is not None
    units = db.firings.units(firings[0].id)
    assert [unit.state for unit in units] == [DONE] * len(names)
    assert {unit.claims for unit in units} == {1}
    assert {unit.holder for unit in units} == {"daemon-a", "daemon-b"}  # both did some


def test_a_unit_of_a_daemon_that_died_is_taken_over_when_its_lease_lapses(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    calls = BlockingCalls(["maya", "sam"])
    calls.release_all(["linker"])
    firing, _ = db.firings.open(
        "linker@killed", jobs=("linker",), namespaces=["maya", "sam"], opened_by="dead", now=T0
    )
    # A daemon claimed "maya" and was killed: nobody renews its lease of 2 s.
    taken = db.firings.claim(holder="dead", now=utc_now(), ttl=timedelta(seconds=2))
    assert taken is not None
    assert taken.namespace == "maya"
    survivor = make(db, dispatchers, calls, holder="daemon-b")
    survivor.start()
    assert calls.entered["linker", "sam"].wait(WAIT)
    time.sleep(QUIET)
    assert calls.ran("linker") == ["sam"]  # "maya" is still the dead daemon's
    assert calls.entered["linker", "maya"].wait(WAIT)  # its lease lapsed: taken over
    deadline = time.monotonic() + WAIT
    while db.firings.progress(firing, now=utc_now()).done < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    units = {unit.namespace: unit for unit in db.firings.units(firing.id)}
    assert units["maya"].state == DONE
    assert units["maya"].claims == 2
    assert units["maya"].holder == "daemon-b"
    assert units["sam"].claims == 1
    # The dead daemon's late finish is refused: the unit is no longer its.
    assert not db.firings.finish(units["maya"].id, holder="dead", outcomes=[], now=utc_now())


def test_firing_progress_counts_and_estimates_the_end(db: Database) -> None:
    firing, opened = db.firings.open(
        "linker@x", jobs=("linker",), namespaces=["a", "b", "c", "d"], opened_by="me", now=T0
    )
    assert opened
    again, opened_again = db.firings.open(
        "linker@x", jobs=("linker",), namespaces=["a"], opened_by="other", now=T0
    )
    assert (again.id, opened_again) == (firing.id, False)
    one = db.firings.claim(holder="me", now=T0, ttl=timedelta(minutes=1))
    two = db.firings.claim(holder="you", now=T0, ttl=timedelta(minutes=1))
    assert one is not None
    assert two is not None
    assert db.firings.finish(one.id, holder="me", outcomes=[], now=T0 + timedelta(minutes=2))
    progress = db.firings.progress(firing, now=T0 + timedelta(minutes=2))
    assert (progress.done, progress.running, progress.left, progress.total) == (1, 0, 3, 4)
    # "you" let its lease lapse: its unit counts as left, held by nobody.
    assert progress.holders == {}
    # One unit in two minutes: three more take six.
    assert progress.estimated_end(T0 + timedelta(minutes=2)) == T0 + timedelta(minutes=8)


def test_finished_firings_are_deleted_after_they_are_kept(db: Database) -> None:
    old, _ = db.firings.open(
        "linker@old", jobs=("linker",), namespaces=["a"], opened_by="me", now=T0
    )
    new, _ = db.firings.open(
        "linker@new", jobs=("linker",), namespaces=["a"], opened_by="me", now=T0
    )
    for _ in (old, new):
        unit = db.firings.claim(holder="me", now=T0, ttl=timedelta(minutes=1))
        assert unit is not None
        finished_at = T0 if unit.firing.id == old.id else T0 + timedelta(days=8)
        assert db.firings.finish(unit.id, holder="me", outcomes=[], now=finished_at)
    assert db.firings.forget_finished(before=T0 + timedelta(days=1)) == 1
    assert db.firings.get("linker@old") is None
    assert db.firings.units(old.id) == []
    kept = db.firings.get("linker@new")
    assert kept is not None
    assert len(db.firings.units(kept.id)) == 1


def test_a_dream_request_in_serve_waits_for_no_firing_a_dead_daemon_left(
    db: Database, dispatchers: list[Dispatcher]
) -> None:
    # A daemon opened the linker's firing and died before running it; `secretary serve` (no
    # daemon, dream requests only) must still run a request on the same namespace.
    db.firings.open("linker@left", jobs=("linker",), namespaces=["maya"], opened_by="dead", now=T0)
    calls = BlockingCalls(["maya"])
    calls.release_all(["auditor"])
    serving = Dispatcher(calls, db.firings, settings=settings(), holder="serve", dreams_only=True)
    dispatchers.append(serving)
    outcomes = serving.dream(dream_request(jobs=("auditor",)))
    assert outcomes is not None
    assert [(o["job"], o["status"]) for o in outcomes] == [("auditor", "applied")]
    assert calls.ran("linker") == []  # the scheduled firing is left for a daemon
