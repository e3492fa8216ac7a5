"""`secretary status` end to end on the embedded default store, with and without a daemon."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from secretary.config import Settings
from secretary.jobs.registry import JOB_NAMES
from store.clock import utc_now
from store.coordination.leases import Lease
from store.kinds import Outcome
from store.schemas import LogIn, MemoryIn
from store.service import Store
from store.write.record_info import RecordInfo
from tests.helpers.cli import Run, cli_in


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
    assert text[1] == "schedule:"
    schedule = text[2 : 2 + len(JOB_NAMES)]
    assert [line.split()[0] for line in schedule] == list(JOB_NAMES)
    assert all(line.endswith("next: when a daemon runs") for line in schedule)
    assert text[2 + len(JOB_NAMES)] == "namespace 'default': 1,250 tokens today of 2,000 a day"
    jobs = {line.split()[0]: line for line in text[3 + len(JOB_NAMES) :]}
    assert list(jobs) == list(JOB_NAMES)
    extractor = jobs["extractor"]
    assert " #7: boom; 2 failures in a row; backing off until " in extractor
    assert extractor.endswith("; 1 quarantined; backlog 2")
    assert jobs["linker"].endswith("never ran; backlog 3 (watermark 1, typed_watermark 3)")
    assert jobs["soul_mapper"].endswith("never ran; backlog 3")
    assert "backlog" not in jobs["retention"]
    shown = json.loads(run("status", "--json").output)
    assert shown["daemon"]["running"] is False
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
    assert text[0].startswith("daemon: running (host:42:abc, since ")
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
