"""The store's status: the daemon, the schedule, and per namespace jobs, budget and backlog."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from store.coordination.firings import FiringProgress, FiringView
from store.coordination.leases import Lease, LeaseInfo, daemon_lease_name
from store.database import Database
from store.kinds import MemoryStatus, Outcome
from store.operations import SetStatus
from store.schemas import LogIn, MemoryIn
from store.status import (
    UNKNOWN,
    JobReads,
    Status,
    StatusConfig,
    compose_status,
    firing_label,
    read_status,
)
from store.status.shape import status_json
from store.write.record_info import RecordInfo
from store.write.undo import undo

NOW = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
CONFIG = StatusConfig(
    max_tokens_per_day=1000,
    jobs={
        "extractor": JobReads(source="logs"),
        "linker": JobReads(source="memories", watermarks=("watermark", "typed_watermark")),
        "soul_mapper": JobReads(source="memories", types=("event", "fact")),
        "consolidator": JobReads(source="memories", types=("event",)),
        "retention": None,
    },
)


@pytest.fixture
def seeded(db: Database) -> dict[str, list[int]]:
    """Namespace "a": 3 events, 2 facts, 1 preference, 4 log lines; "b": 1 event."""
    kinds = ["event", "event", "event", "fact", "fact", "preference"]
    items = [MemoryIn(content=f"memory {i}", type=t) for i, t in enumerate(kinds)]
    memories = list(db.writer.add_memories("a", items, now=NOW - 2 * HOUR).ids)
    lines = [
        LogIn(session_id="s", role="user", content=f"line {i}", timestamp=NOW - HOUR)
        for i in range(4)
    ]
    logs = list(db.writer.add_logs("a", lines, now=NOW - HOUR).ids)
    db.writer.add_memories("b", [MemoryIn(content="other")], now=NOW - 2 * HOUR)
    return {"memories": memories, "logs": logs}


def test_status_reports_health_backlog_and_budget(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    memories, logs = seeded["memories"], seeded["logs"]
    # The extractor read two log lines, then failed twice in a row and backs off.
    db.writer.apply(
        "a",
        "extractor",
        (),
        now=NOW - HOUR,
        info=RecordInfo(outcome=Outcome.FAILED, error="boom", tokens_in=300, tokens_out=50),
        job_state={"watermark": logs[1]},
        health={
            "last": {
                "status": "failed",
                "at": (NOW - HOUR).isoformat(),
                "record": 9,
                "message": "boom",
            },
            "failures": 2,
            "backoff_until": (NOW + HOUR).isoformat(),
            "failing": {"ids": [logs[2], logs[3]], "count": 2},
            "quarantined": [101, 102, 103],
        },
    )
    # The linker linked everything up to the fourth memory, typed nothing; spent on the day.
    db.writer.apply(
        "a",
        "linker",
        (),
        now=NOW - HOUR,
        info=RecordInfo(outcome=Outcome.NOTHING, tokens_in=500, tokens_out=200, cost=0.25),
        job_state={"watermark": memories[3], "typed_watermark": 0},
        health={"last": {"status": "nothing", "at": (NOW - HOUR).isoformat(), "record": None}},
    )
    # Yesterday's tokens do not count today.
    db.writer.apply(
        "a",
        "auditor",
        (),
        now=NOW - 24 * HOUR,
        info=RecordInfo(outcome=Outcome.NOTHING, tokens_in=999),
        health={"last": {"status": "nothing", "at": (NOW - 24 * HOUR).isoformat()}},
    )
    found = read_status(db, CONFIG, now=NOW)
    assert [space.namespace for space in found.namespaces] == ["a", "b"]
    a = found.namespaces[0]
    assert (a.tokens_today, a.cost_today, a.budget_reached) == (1050, 0.25, True)
    jobs = {job.job: job for job in a.jobs}
    # The configured jobs in their order, then one that ran but the config does not know.
    assert list(jobs) == [
        "extractor",
        "linker",
        "soul_mapper",
        "consolidator",
        "retention",
        "auditor",
    ]
    extractor = jobs["extractor"]
    assert extractor.failures == 2
    assert extractor.backing_off
    assert extractor.backoff_until == NOW + HOUR
    assert (extractor.failing, extractor.quarantined) == (2, 3)
    assert extractor.backlog == {"watermark": 2}
    assert extractor.last is not None
    assert extractor.last["message"] == "boom"
    assert jobs["linker"].backlog == {"watermark": 2, "typed_watermark": 6}
    assert jobs["linker"].backlog_total == 6
    assert jobs["soul_mapper"].backlog == {"watermark": 5}  # events and facts only
    assert jobs["consolidator"].backlog == {"watermark": 3}  # events only
    assert jobs["retention"].backlog is None
    assert jobs["auditor"].backlog is None  # not in the config: what it reads is unknown
    assert jobs["soul_mapper"].last is None
    # The budget is per namespace: "b" spent nothing.
    assert found.namespaces[1].tokens_today == 0
    assert not found.namespaces[1].budget_reached
    # An hour later the back-off is over (the failures stay until a run succeeds).
    later = read_status(db, CONFIG, now=NOW + 2 * HOUR, namespaces=["a"])
    assert [space.namespace for space in later.namespaces] == ["a"]
    assert not later.namespaces[0].jobs[0].backing_off
    assert later.namespaces[0].jobs[0].failures == 2


def test_status_daemon_schedule_running_and_interrupted(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    none = read_status(db, CONFIG, now=NOW)
    assert not none.daemon.running
    assert none.daemon.holder is None
    lease = Lease(db.engine, holder="host:1:abc", ttl=timedelta(minutes=5), clock=lambda: NOW)
    lease.acquire()
    db.schedules.mark_fired("linker", now=NOW - HOUR)  # before this daemon: cut short
    db.schedules.mark_fired("extractor", now=NOW + timedelta(minutes=1))  # this daemon's, going
    db.schedules.mark_fired("soul_mapper", now=NOW - HOUR)
    db.schedules.mark_finished(
        "soul_mapper", now=NOW - HOUR + timedelta(minutes=2), next_fire_at=NOW + 3 * HOUR
    )
    db.schedules.set_paused("consolidator", True, now=NOW)
    running = read_status(db, CONFIG, now=NOW + timedelta(minutes=2))
    assert running.daemon.running
    assert (running.daemon.holder, running.daemon.since) == ("host:1:abc", NOW)
    assert running.daemon.expires_at == NOW + timedelta(minutes=5)
    schedule = {entry.job: entry for entry in running.schedule}
    assert list(schedule) == ["extractor", "linker", "soul_mapper", "consolidator", "retention"]
    assert schedule["extractor"].firing == "running"
    assert schedule["linker"].firing == "interrupted"
    assert schedule["soul_mapper"].firing == "idle"
    assert schedule["soul_mapper"].next_fire_at == NOW + 3 * HOUR
    assert schedule["consolidator"].paused
    # Once the lease ran out no daemon runs: no next firing, and the open firings were cut short.
    stopped = read_status(db, CONFIG, now=NOW + HOUR)
    assert not stopped.daemon.running
    assert stopped.daemon.holder == "host:1:abc"
    schedule = {entry.job: entry for entry in stopped.schedule}
    assert schedule["soul_mapper"].next_fire_at is None
    assert schedule["extractor"].firing == "interrupted"
    shown = status_json(stopped)
    assert shown["daemon"]["running"] is False
    assert shown["schedule"][0] == {
        "job": "extractor",
        "paused": False,
        "next_fire_at": None,
        "last_fired_at": (NOW + timedelta(minutes=1)).isoformat(),
        "last_finished_at": None,
        "firing": "interrupted",
        "interrupted": True,
    }


def test_status_without_config_lists_only_jobs_that_ran_and_unknown_budget(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    memories = seeded["memories"]
    db.writer.apply(
        "a",
        "auditor",
        [SetStatus(memory_id=memories[0], status=MemoryStatus.ARCHIVED)],
        now=NOW,
        health={"last": {"status": "applied", "at": NOW.isoformat(), "record": 1}},
    )
    found = read_status(db, now=NOW)
    assert found.max_tokens_per_day is None
    shown = status_json(found)
    assert shown["budget"] == {"max_tokens_per_day": None, "known": False, "day": "2026-02-01"}
    a = shown["namespaces"][0]
    assert [job["job"] for job in a["jobs"]] == ["auditor"]
    assert a["jobs"][0]["backlog"] is None
    assert a["jobs"][0]["last"]["status"] == "applied"
    assert shown["namespaces"][1] == {
        "namespace": "b",
        "tokens_today": 0,
        "cost_today": 0.0,
        "budget_reached": False,
        "jobs": [],
    }
    assert shown["schedule"] == []


def test_backlog_reads_count_past_each_namespace_mark(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    memories, logs = seeded["memories"], seeded["logs"]
    assert db.memories.count_after({"a": memories[1], "b": 0, "c": 0}) == {"a": 4, "b": 1, "c": 0}
    assert db.memories.count_after({"a": 0}, types=["fact"]) == {"a": 2}
    assert db.work.logs_count_after({"a": logs[0], "b": 0}) == {"a": 3, "b": 0}
    assert db.memories.texts("a", [memories[0], 99_999]) == {memories[0]: "memory 0"}
    assert db.memories.texts("b", [memories[0]]) == {}


def test_status_daemon_killed_on_this_host_is_not_running(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no process any more
    holder = f"{socket.gethostname()}:{dead.pid}:abc"
    Lease(db.engine, holder=holder, ttl=timedelta(minutes=5), clock=lambda: NOW).acquire()

    status = read_status(db, CONFIG, now=NOW + timedelta(minutes=1))

    assert not status.daemon.running  # its lease has not expired, but its process is gone
    assert status.daemon.holder == holder


# -- several daemons and the night's progress ------------------------------------------------------

MINUTE = timedelta(minutes=1)
FIRING = FiringView(
    id=1,
    key="linker@2026-02-01T02:00:00+00:00",
    jobs=("linker",),
    manual=False,
    retry_quarantined=False,
    opened_by="host:1:abc",
    opened_at=NOW - HOUR,
    finished_at=None,
)


def compose(**given: Any) -> Status:
    """``compose_status`` over no namespaces, no schedule and no jobs, with ``given``."""
    empty: dict[str, Any] = {
        "now": NOW,
        "config": UNKNOWN,
        "daemons": (),
        "lease": None,
        "firings": (),
        "overrides": {},
        "states": (),
        "namespaces": (),
        "usage": {},
        "backlogs": {},
    }
    return compose_status(**{**empty, **given})


def test_compose_status_two_daemons_each_with_what_it_runs_and_the_night() -> None:
    first = LeaseInfo(holder="web1:4242:aa", acquired_at=NOW - 2 * HOUR, expires_at=NOW + MINUTE)
    second = LeaseInfo(holder="web2:17:bb", acquired_at=NOW - HOUR, expires_at=NOW + MINUTE)
    linker = FiringProgress(
        firing=FIRING,
        done=40,
        running=3,
        left=957,
        first_started_at=NOW - 40 * MINUTE,  # a unit a minute: 960 more minutes
        holders={"web1:4242:aa": ("sam", "maya"), "web2:17:bb": ("zoe",)},
    )
    dream = FiringProgress(
        firing=replace(FIRING, id=2, key="dream:42", jobs=("extractor", "linker"), manual=True),
        done=0,
        running=1,
        left=0,
        first_started_at=NOW - MINUTE,
        holders={"web2:17:bb": ("ann",)},
    )

    found = compose(daemons=[first, second], firings=[linker, dream])

    assert [d.holder for d in found.daemons] == ["web1:4242:aa", "web2:17:bb"]
    assert found.daemon == found.daemons[0]
    assert all(d.running for d in found.daemons)
    (held,) = found.daemons[0].holds
    assert (held.firing, held.label, held.jobs) == (FIRING.key, "linker@02:00", ("linker",))
    assert (held.namespaces, held.hidden) == (("maya", "sam"), 0)
    assert [(h.label, h.namespaces) for h in found.daemons[1].holds] == [
        ("linker@02:00", ("zoe",)),
        ("dream request #42", ("ann",)),
    ]
    night = {firing.key: firing for firing in found.firings}
    assert list(night) == [FIRING.key, "dream:42"]
    assert (night[FIRING.key].done, night[FIRING.key].total) == (40, 1000)
    assert night[FIRING.key].estimated_end == NOW + 960 * MINUTE
    assert night["dream:42"].estimated_end is None  # no unit done yet
    assert night["dream:42"].manual

    # A caller limited to some namespaces sees only those of what runs; the others are counted.
    scoped = compose(daemons=[first, second], firings=[linker], scope={"maya"})
    (held,) = scoped.daemons[0].holds
    assert (held.namespaces, held.hidden) == (("maya",), 1)
    assert (scoped.daemons[1].holds[0].namespaces, scoped.daemons[1].holds[0].hidden) == ((), 1)

    shown = status_json(found)
    assert shown["daemon"] == {
        "running": True,
        "holder": "web1:4242:aa",
        "since": (NOW - 2 * HOUR).isoformat(),
        "expires_at": (NOW + MINUTE).isoformat(),
    }
    assert shown["daemons"][1]["holds"][1] == {
        "firing": "dream:42",
        "label": "dream request #42",
        "jobs": ["extractor", "linker"],
        "namespaces": ["ann"],
        "hidden": 0,
    }
    assert shown["night"]["in_progress"] is True
    assert shown["night"]["firings"][0] == {
        "key": FIRING.key,
        "label": "linker@02:00",
        "jobs": ["linker"],
        "manual": False,
        "opened_at": (NOW - HOUR).isoformat(),
        "done": 40,
        "running": 3,
        "left": 957,
        "total": 1000,
        "estimated_end": (NOW + 960 * MINUTE).isoformat(),
    }


def test_compose_status_no_daemon_running_shows_the_last_one_and_no_night() -> None:
    gone = LeaseInfo(holder="web1:4242:aa", acquired_at=NOW - 2 * HOUR, expires_at=NOW - MINUTE)
    found = compose(lease=gone)
    assert found.daemons == ()
    assert not found.daemon.running
    assert (found.daemon.holder, found.daemon.expires_at) == ("web1:4242:aa", NOW - MINUTE)
    assert status_json(found)["night"] == {"in_progress": False, "firings": []}
    assert status_json(found)["daemons"] == []


def test_firing_label_is_short_and_dated_only_off_today() -> None:
    assert firing_label("linker@2026-02-01T02:00:00+00:00", NOW) == "linker@02:00"
    assert firing_label("linker@2026-01-31T23:00:00+00:00", NOW) == "linker@2026-01-31 23:00"
    # A schedule in another time zone keeps its own clock time.
    assert firing_label("auditor@2026-02-01T03:30:00+01:00", NOW) == "auditor@03:30"
    assert firing_label("dream:7", NOW) == "dream request #7"
    assert firing_label("something else", NOW) == "something else"
    assert firing_label("linker@not a time", NOW) == "linker@not a time"


def test_status_reads_every_live_daemon_what_it_runs_and_the_night(db: Database) -> None:
    several = db.engine.dialect.name == "postgresql"  # on SQLite one daemon holds the store
    holders = ["web1:1:aa", "web2:2:bb"] if several else ["web1:1:aa"]
    for n, holder in enumerate(holders):
        Lease(
            db.engine,
            holder=holder,
            ttl=timedelta(minutes=5),
            clock=lambda n=n: NOW + n * MINUTE,
            name=daemon_lease_name(db.engine, holder, shared_index=True),
        ).acquire()
    for namespace in ("a", "b", "c", "d"):
        db.writer.add_memories(namespace, [MemoryIn(content="x")], now=NOW - HOUR)
    key = "linker@2026-02-01T12:00:00+00:00"
    db.firings.open(
        key, jobs=("linker",), namespaces=["a", "b", "c", "d"], opened_by=holders[0], now=NOW
    )
    ttl = timedelta(minutes=5)
    first = db.firings.claim(holder=holders[0], now=NOW, ttl=ttl)
    assert first is not None
    assert db.firings.finish(first.id, holder=holders[0], outcomes=[], now=NOW + MINUTE)
    assert db.firings.claim(holder=holders[-1], now=NOW + MINUTE, ttl=ttl) is not None
    assert db.firings.claim(holder=holders[0], now=NOW + MINUTE, ttl=ttl) is not None
    # The linker fired before either daemon: cut short, were its units not still being run.
    db.schedules.mark_fired("linker", now=NOW - HOUR)

    found = read_status(db, CONFIG, now=NOW + 2 * MINUTE)

    assert [d.holder for d in found.daemons] == holders
    assert found.daemon.holder == holders[0]
    held = {d.holder: [(x.label, x.namespaces) for x in d.holds] for d in found.daemons}
    if several:
        assert held == {
            holders[0]: [("linker@12:00", ("c",))],
            holders[1]: [("linker@12:00", ("b",))],
        }
    else:
        assert held == {holders[0]: [("linker@12:00", ("b", "c"))]}
    (night,) = found.firings
    assert (night.key, night.done, night.running, night.left) == (key, 1, 2, 1)
    assert night.estimated_end == NOW + 2 * MINUTE + 3 * 2 * MINUTE  # 2 minutes a unit so far
    schedule = {entry.job: entry for entry in found.schedule}
    assert schedule["linker"].firing == "running"
    assert schedule["extractor"].firing == "idle"

    # A key of namespace "b" sees "b" named, the others counted; the counts are the store's.
    scoped = read_status(db, CONFIG, now=NOW + 2 * MINUTE, namespaces=["b"])
    holds = [x for d in scoped.daemons for x in d.holds]
    assert sorted((x.namespaces, x.hidden) for x in holds) == (
        [((), 1), (("b",), 0)] if several else [(("b",), 1)]
    )
    assert scoped.firings[0].total == 4

    # Once every lease ran out no daemon runs: the linker's firing was cut short after all.
    later = read_status(db, CONFIG, now=NOW + HOUR)
    assert later.daemons == ()
    assert not later.daemon.running
    assert later.firings[0].running == 0  # its units' leases lapsed: left for a daemon to take
    assert {entry.job: entry for entry in later.schedule}["linker"].firing == "interrupted"


def test_status_calls_a_job_s_last_run_undone_once_it_is(
    db: Database, seeded: dict[str, list[int]]
) -> None:
    archive = [SetStatus(memory_id=seeded["memories"][0], status=MemoryStatus.ARCHIVED)]
    record_id = db.writer.apply("a", "auditor", archive, now=NOW).record_id
    assert record_id is not None
    last = {"status": "applied", "at": NOW.isoformat(), "record": record_id}
    db.writer.apply("a", "auditor", (), now=NOW, health={"last": last})

    def shown() -> dict[str, Any]:
        (job,) = status_json(read_status(db, now=NOW))["namespaces"][0]["jobs"]
        return dict(job["last"])

    assert shown()["status"] == "applied"
    undone = undo(db.writer, record_id, now=NOW + HOUR).record_id
    assert shown() == {**last, "status": "undone", "undone_by": undone}
