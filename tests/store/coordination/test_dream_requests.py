"""The dream request queue, on SQLite and PostgreSQL: enqueue, one claimer per request, takeover
of a dead picker's request, finish, cancel; and the loop that runs them."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time
from sqlalchemy import Engine

from store.clock import utc_now
from store.coordination.dream_requests import DreamRequests, DreamRequestView
from store.coordination.dream_worker import Dreamer, DreamWorker, run_pending
from store.coordination.leases import Lease
from store.database import Database

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
WAIT = 10.0


def enqueue(requests: DreamRequests, namespace: str | None = "maya", **kwargs: Any) -> int:
    values: dict[str, Any] = {"jobs": (), "retry_quarantined": False, "requested_by": "test"}
    return requests.enqueue(namespace=namespace, now=utc_now(), **(values | kwargs))


def test_dream_requests_enqueue_then_get_returns_the_pending_request(db: Database) -> None:
    requests = db.dream_requests
    with freeze_time(T0):
        request_id = enqueue(requests, jobs=("auditor", "linker"), retry_quarantined=True)
    request = requests.get(request_id)
    assert request is not None
    assert (request.namespace, request.jobs, request.retry_quarantined) == (
        "maya",
        ("auditor", "linker"),
        True,
    )
    assert (request.status, request.requested_at, request.picked_by) == ("pending", T0, None)
    assert request.outcomes == ()
    assert not request.finished
    assert requests.get(request_id + 1) is None


def test_dream_requests_progress_keeps_the_runs_so_far_for_its_picker_only(db: Database) -> None:
    requests = db.dream_requests
    request_id = enqueue(requests)
    run = {"job": "auditor", "namespace": "maya", "status": "nothing", "message": "nothing to do"}

    assert not requests.progress(request_id, picker="a", outcomes=[run])  # not claimed yet
    assert requests.claim(picker="a", now=T0) is not None
    assert not requests.progress(request_id, picker="b", outcomes=[run])  # not b's
    assert requests.progress(request_id, picker="a", outcomes=[run])
    shown = requests.get(request_id)
    assert shown is not None
    assert (shown.status, shown.outcomes) == ("running", (run,))
    assert requests.finish(request_id, picker="a", outcomes=[run, run], now=T0)
    assert not requests.progress(request_id, picker="a", outcomes=[run])  # finished: it stays


def test_dream_requests_claim_takes_the_oldest_once(db: Database) -> None:
    requests = db.dream_requests
    first, second = enqueue(requests), enqueue(requests, None)
    with freeze_time(T0):
        Lease(db.engine, holder="a", ttl=TTL).acquire()
        claimed = requests.claim(picker="a", now=utc_now())
    assert claimed is not None
    assert (claimed.id, claimed.status, claimed.picked_by, claimed.started_at) == (
        first,
        "running",
        "a",
        T0,
    )
    with freeze_time(T0):
        Lease(db.engine, holder="b", ttl=TTL, name="other").acquire()
        again = requests.claim(picker="b", now=utc_now())
        assert again is not None
        assert again.id == second
        # Both pickers hold live leases: nothing is left for a third.
        assert requests.claim(picker="c", now=utc_now()) is None


def test_dream_requests_two_claimers_at_once_take_one_request(engine: Engine) -> None:
    requests = [DreamRequests(engine) for _ in range(2)]
    request_id = enqueue(requests[0])
    now = utc_now()
    for holder in ("a", "b"):
        Lease(engine, holder=holder, ttl=TTL, name=f"lease-{holder}").acquire()
    start = threading.Barrier(2)
    won: dict[str, DreamRequestView | None] = {}

    def claim(holder: str, table: DreamRequests) -> None:
        start.wait(WAIT)
        won[holder] = table.claim(picker=holder, now=now)

    threads = [
        threading.Thread(target=claim, args=(holder, table))
        for holder, table in zip(("a", "b"), requests, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    taken = [holder for holder, request in won.items() if request is not None]
    assert len(taken) == 1
    stored = requests[0].get(request_id)
    assert stored is not None
    assert stored.picked_by == taken[0]


def test_dream_requests_dead_pickers_request_is_taken_over(db: Database) -> None:
    requests = db.dream_requests
    request_id = enqueue(requests)
    with freeze_time(T0) as frozen:
        dead = Lease(db.engine, holder="dead-daemon", ttl=TTL)
        dead.acquire()
        assert requests.claim(picker="dead-daemon", now=utc_now()) is not None
        Lease(db.engine, holder="new-daemon", ttl=TTL, name="other").acquire()
        assert requests.claim(picker="new-daemon", now=utc_now()) is None  # still alive
        frozen.tick(TTL + timedelta(seconds=1))  # the dead daemon stopped renewing
        new = Lease(db.engine, holder="new-daemon", ttl=TTL)
        new.acquire()
        taken = requests.claim(picker="new-daemon", now=utc_now())
    assert taken is not None
    assert (taken.id, taken.picked_by) == (request_id, "new-daemon")
    # The dead one's late report is refused: the request is no longer its own.
    assert not requests.finish(request_id, picker="dead-daemon", outcomes=[], now=T0)


def test_dream_requests_own_cut_short_request_is_taken_again(db: Database) -> None:
    requests = db.dream_requests
    request_id = enqueue(requests)
    Lease(db.engine, holder="me", ttl=TTL).acquire()
    assert requests.claim(picker="me", now=utc_now()) is not None
    again = requests.claim(picker="me", now=utc_now())
    assert again is not None
    assert again.id == request_id


def test_dream_requests_finish_stores_outcomes_or_the_error(db: Database) -> None:
    requests = db.dream_requests
    done_id, failed_id = enqueue(requests), enqueue(requests)
    outcome = {"job": "auditor", "namespace": "maya", "status": "applied", "record_id": 3}
    with freeze_time(T0):
        requests.claim(picker="p", now=utc_now())
        assert requests.finish(done_id, picker="p", outcomes=[outcome], now=utc_now())
        requests.claim(picker="p", now=utc_now())
        assert requests.finish(failed_id, picker="p", outcomes=[], now=utc_now(), error="boom")
    done, failed = requests.get(done_id), requests.get(failed_id)
    assert done is not None
    assert failed is not None
    assert (done.status, done.outcomes, done.finished_at, done.error) == (
        "done",
        (outcome,),
        T0,
        None,
    )
    assert (failed.status, failed.error, failed.finished) == ("failed", "boom", True)
    assert not requests.finish(done_id, picker="p", outcomes=[], now=T0)  # finished once
    assert [request.id for request in requests.recent()] == [failed_id, done_id]


def test_dream_requests_cancel_only_while_pending(db: Database) -> None:
    requests = db.dream_requests
    pending, running = enqueue(requests), enqueue(requests)
    requests.claim(picker="p", now=utc_now())  # takes the oldest: ``pending``
    assert not requests.cancel(pending, reason="interrupted", now=utc_now())
    assert requests.cancel(running, reason="interrupted", now=utc_now())
    cancelled = requests.get(running)
    assert cancelled is not None
    assert (cancelled.status, cancelled.error) == ("failed", "interrupted")


# -- running them -----------------------------------------------------------------------------


def test_run_pending_runs_each_request_and_stores_its_outcomes_or_error(db: Database) -> None:
    requests = db.dream_requests
    good, bad = enqueue(requests), enqueue(requests, "broken")
    Lease(db.engine, holder="p", ttl=TTL).acquire()

    def run(request: DreamRequestView) -> Sequence[Mapping[str, Any]]:
        if request.namespace == "broken":
            raise RuntimeError("the jobs broke")
        return [{"job": "auditor", "namespace": request.namespace, "status": "nothing"}]

    assert run_pending(requests, picker="p", run=run) == 2
    done, failed = requests.get(good), requests.get(bad)
    assert done is not None
    assert failed is not None
    assert done.status == "done"
    assert done.outcomes[0]["namespace"] == "maya"
    assert (failed.status, failed.error) == ("failed", "RuntimeError: the jobs broke")


def test_run_pending_stopped_run_leaves_the_request_running_for_the_next_taker(
    db: Database,
) -> None:
    requests = db.dream_requests
    request_id = enqueue(requests)
    assert run_pending(requests, picker="gone", run=lambda _: None) == 1
    left = requests.get(request_id)
    assert left is not None
    assert (left.status, left.picked_by) == ("running", "gone")
    taken = requests.claim(picker="next", now=utc_now())  # "gone" holds no lease
    assert taken is not None
    assert taken.id == request_id


def test_dream_worker_runs_requests_unless_a_daemon_holds_the_lease(db: Database) -> None:
    requests = db.dream_requests
    ran: list[int] = []

    def run(request: DreamRequestView) -> Sequence[Mapping[str, Any]]:
        ran.append(request.id)
        return []

    worker = DreamWorker(requests, Dreamer(jobs=("auditor",), run=run), engine=db.engine)
    first = enqueue(requests)
    with Lease(db.engine, holder="daemon-1", ttl=TTL):
        assert worker.tick() == 0  # the daemon takes the requests
    assert worker.tick() == 1
    assert ran == [first]
    done = requests.get(first)
    assert done is not None
    assert (done.status, done.picked_by) == ("done", worker.lease.holder)
    worker.close()
    assert not requests.picker_alive(worker.lease.holder, now=utc_now())


def test_dream_worker_thread_picks_a_request_up(db: Database) -> None:
    requests = db.dream_requests
    finished = threading.Event()

    def run(_: DreamRequestView) -> Sequence[Mapping[str, Any]]:
        finished.set()
        return []

    dreamer = Dreamer(jobs=(), run=run, poll_seconds=0.05, lease_seconds=5)
    worker = DreamWorker(requests, dreamer, engine=db.engine)
    request_id = enqueue(requests)
    worker.start()
    try:
        assert finished.wait(WAIT)
    finally:
        worker.close()
    done = requests.get(request_id)
    assert done is not None
    assert done.status == "done"


def test_dream_worker_needs_a_runner(db: Database) -> None:
    with pytest.raises(ValueError, match="runs requests"):
        DreamWorker(db.dream_requests, Dreamer(jobs=()), engine=db.engine)
