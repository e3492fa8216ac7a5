"""`secretary status` end to end on the embedded default store, with and without a daemon."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from secretary.cli_status import status_lines
from secretary.config import Settings
from secretary.jobs.registry import JOB_NAMES
from store.clock import utc_now
from store.coordination.firings import FiringProgress, FiringView
from store.coordination.leases import Lease, LeaseInfo
from store.kinds import Outcome
from store.schemas import LogIn, MemoryIn
from store.service import Store
from store.status import UNKNOWN, compose_status
from store.write.record_info import RecordInfo
from tests.helpers.cli import Run, cli_in

NOW = datetime(2026, 11, 28, 2, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
AT = r"(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC"  # a time in short (its date when not today's)


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setenv("SECRETARY_LLM_MAX_TOKENS_PER_DAY", "2000")
    return cli_in(tmp_path / "data", monkeypatch)


@pytest.fixture
def store(run: Run, tmp_path: Path) -> Store:
    """Three events and two log lines in "default"; the extractor failed twice and backs off."""
    run("init")
    opened = Store.open(Settings(data_dir=tmp_path / "data"))
    now = utc_now()
    db = opened.db
    ids = db.writer.add_memories("default", [MemoryIn(content=f"m{i}") for i in range(3)], now=now)
    lines = [LogIn(session_id="s", role="user", content=f"l{i}", timestamp=now) for i in range(2)]
    db.writer.add_logs("default", lines, now=now)
    db.writer.apply(
        "default",
        "extractor",
        (),
        now=now,
        info=RecordInfo(outcome=Outcome.FAILED, error="boom", tokens_in=1000, tokens_out=250),
        health={
            "last": {"status": "failed", "at": now.isoformat(), "record": 7, "message": "boom"},
            "failures": 2,
            "backoff_until": (now + timedelta(hours=1)).isoformat(),
            "quarantined": [ids.ids[0]],
        },
    )
    db.writer.apply("default", "linker", (), now=now, job_state={"watermark": ids.ids[1]})
    return opened


def test_status_without_daemon_shows_jobs_budget_and_backlog(run: Run, store: Store) -> None:
    store.close()
    text = run("status").output.splitlines()
    assert text[0] == "daemon: not running"
    assert text[1] == "tonight: no night in progress"
    assert text[2] == "schedule:"
    schedule = text[3 : 3 + len(JOB_NAMES)]
    assert [line.split()[0] for line in schedule] == list(JOB_NAMES)
    # No daemon publishes its next firings: the schedule's own, as `schedule show` gives them.
    shown = json.loads(run("schedule", "show", "--json").output)["jobs"]
    for line, job in zip(schedule, shown, strict=True):
        at = datetime.fromisoformat(job["next"][0]).isoformat(timespec="seconds")
        assert line.endswith(f"next {at} if a daemon runs then"), (line, job)
    assert text[3 + len(JOB_NAMES)] == "namespace 'default': 1,250 tokens today of 2,000 a day"
    jobs = {line.split()[0]: line for line in text[4 + len(JOB_NAMES) :]}
    assert list(jobs) == list(JOB_NAMES)
    extractor = jobs["extractor"]
    assert " #7: boom; 2 failures in a row; backing off until " in extractor
    assert extractor.endswith("; 1 quarantined; backlog 2")
    assert jobs["linker"].endswith(
        "never ran; backlog 3 (1 for the part that needs no model, 3 for the model)"
    )
    assert jobs["soul_mapper"].endswith("never ran; backlog 3")
    assert "backlog" not in jobs["retention"]
    shown = json.loads(run("status", "--json").output)
    assert shown["daemon"]["running"] is False
    assert (shown["daemons"], shown["night"]) == ([], {"in_progress": False, "firings": []})
    assert shown["budget"]["max_tokens_per_day"] == 2000
    space = shown["namespaces"][0]
    assert (space["namespace"], space["tokens_today"], space["budget_reached"]) == (
        "default",
        1250,
        False,
    )
    extractor_json = space["jobs"][0]
    assert extractor_json["job"] == "extractor"
    assert (extractor_json["failures"], extractor_json["quarantined"]) == (2, 1)
    assert extractor_json["backlog"] == 2
    unknown = run("status", "--json", "-n", "nobody", code=1).stderr
    assert "namespace 'nobody' holds nothing (namespaces in this store: default)" in unknown


def test_status_with_daemon_running_shows_holder_and_next_firing(run: Run, store: Store) -> None:
    now = utc_now()
    Lease(store.db.engine, holder="host:42:abc", ttl=timedelta(minutes=5)).acquire()
    store.db.schedules.set_next_fire("auditor", now + timedelta(hours=2), now=now)
    store.db.schedules.mark_fired("consolidator", now=now - timedelta(days=1))  # cut short
    store.close()
    text = [line.strip() for line in run("status").output.splitlines()]
    assert text[0] == "daemons: 1 running"
    assert re.fullmatch(rf"host:42:abc since {AT} \(lease until {AT}\), idle", text[1]), text[1]
    auditor = next(line for line in text if line.startswith("auditor "))
    assert auditor.endswith(f"next {(now + timedelta(hours=2)).isoformat(timespec='seconds')}")
    consolidator = next(line for line in text if line.startswith("consolidator "))
    assert "INTERRUPTED: the firing of " in consolidator
    assert "never finished (a restarted daemon runs it again)" in consolidator
    shown = json.loads(run("status", "--json").output)
    assert shown["daemon"]["holder"] == "host:42:abc"
    interrupted = {entry["job"]: entry["interrupted"] for entry in shown["schedule"]}
    assert interrupted["consolidator"] is True
    assert interrupted["auditor"] is False


def test_status_with_daemon_running_units_shows_what_it_runs_and_the_night(
    run: Run, store: Store
) -> None:
    now = utc_now()
    Lease(store.db.engine, holder="host:42:abc", ttl=timedelta(minutes=5)).acquire()
    firings = store.db.firings
    key = f"linker@{now.replace(second=0, microsecond=0).isoformat()}"
    firings.open(
        key, jobs=("linker",), namespaces=["default", "maya", "sam"], opened_by="x", now=now
    )
    ttl = timedelta(minutes=5)
    first = firings.claim(holder="host:42:abc", now=now - timedelta(minutes=2), ttl=ttl)
    assert first is not None
    assert firings.finish(first.id, holder="host:42:abc", outcomes=[], now=now)
    assert firings.claim(holder="host:42:abc", now=now, ttl=ttl) is not None
    store.close()
    text = [line.strip() for line in run("status").output.splitlines()]
    assert text[0] == "daemons: 1 running"
    assert text[1].endswith("), runs linker on maya"), text[1]
    assert re.fullmatch(
        rf"tonight: linker@\S* ?\d\d:\d\d 1 of 3 namespaces done, 1 running, 1 left; "
        rf"ends about {AT}",
        text[2],
    ), text[2]
    shown = json.loads(run("status", "--json").output)
    (daemon,) = shown["daemons"]
    assert daemon["holder"] == "host:42:abc"
    assert daemon["holds"] == [
        {
            "firing": key,
            "label": daemon["holds"][0]["label"],
            "jobs": ["linker"],
            "namespaces": ["maya"],
            "hidden": 0,
        }
    ]
    assert daemon["holds"][0]["label"].endswith(f"{now:%H:%M}")
    (firing,) = shown["night"]["firings"]
    assert (firing["done"], firing["running"], firing["left"], firing["total"]) == (1, 1, 1, 3)
    assert firing["estimated_end"] is not None


def test_status_lines_several_daemons_and_firings() -> None:
    firing = FiringView(
        id=1,
        key="linker@2026-11-28T02:00:00+00:00",
        jobs=("linker",),
        manual=False,
        retry_quarantined=False,
        opened_by="web1:4242:9f3c0a1b2c3d",
        opened_at=NOW - 30 * MINUTE,
        finished_at=None,
    )
    names = tuple(f"user{n:02}" for n in range(16))
    linker = FiringProgress(
        firing=firing,
        done=42,
        running=17,
        left=941,
        first_started_at=NOW - 28 * MINUTE,
        holders={"web1:4242:9f3c0a1b2c3d": names, "web2:17:0a1b2c3d4e5f": ("zoe",)},
    )
    dream = FiringProgress(
        firing=FiringView(**{**vars(firing), "id": 2, "key": "dream:7", "manual": True}),
        done=0,
        running=0,
        left=1,
        first_started_at=None,
        holders={},
    )
    daemons = [
        LeaseInfo(
            holder="web1:4242:9f3c0a1b2c3d",
            acquired_at=NOW - 32 * MINUTE,
            expires_at=NOW + MINUTE,
        ),
        LeaseInfo(
            holder="web2:17:0a1b2c3d4e5f",
            acquired_at=NOW - 26 * 60 * MINUTE,
            expires_at=NOW + MINUTE,
        ),
        LeaseInfo(holder="web3:9:ffff", acquired_at=NOW - MINUTE, expires_at=NOW + MINUTE),
    ]
    found = compose_status(
        now=NOW,
        config=UNKNOWN,
        daemons=daemons,
        lease=None,
        firings=[linker, dream],
        overrides={},
        states=(),
        namespaces=(),
        usage={},
        backlogs={},
        scope=set(names[:3]),
    )
    assert status_lines(found)[:7] == [
        "daemons: 3 running",
        "  web1:4242:9f3c0a1b2c3d since 01:58 UTC (lease until 02:31 UTC), "
        "runs linker on user00, user01, user02 and 13 more",
        "  web2:17:0a1b2c3d4e5f since 2026-11-27 00:30 UTC (lease until 02:31 UTC), "
        "runs linker on 1 namespace",
        "  web3:9:ffff since 02:29 UTC (lease until 02:31 UTC), idle",
        "tonight: 2 firings open",
        "  linker@02:00 42 of 1,000 namespaces done, 17 running, 941 left; ends about 13:08 UTC",
        "  dream request #7 0 of 1 namespace done, 0 running, 1 left; "
        "end unknown until a unit is done",
    ]
