"""GET /v1/status, GET /v1/records/{id}/diff, the records list's new fields, and job /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from secretary.config import Settings
from store.api.app import create_app
from store.coordination.leases import Lease
from store.database import Database
from store.kinds import MemoryStatus, Outcome
from store.operations import CreateMemory, CreateRelation, SetStatus
from store.schemas import LogIn, MemoryIn
from store.service import Store
from store.settings import ApiKey, ApiSettings
from store.status import JobReads, StatusConfig, job_metrics
from store.status.job_metrics import RecordFold
from store.write.record_info import RecordInfo
from store.write.undo import undo

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
KEY_A = "key-a-0123456789"
A = {"Authorization": f"Bearer {KEY_A}"}
CONFIG = StatusConfig(
    max_tokens_per_day=5000,
    jobs={
        "extractor": JobReads(source="logs"),
        "auditor": JobReads(source="memories", watermarks=("exact_watermark", "watermark")),
    },
)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    keys = (ApiKey(key=KEY_A, namespaces=("a",)),)
    opened = Store.open(Settings(data_dir=tmp_path, api=ApiSettings(keys=keys)), create=True)
    yield opened
    opened.close()


@pytest.fixture
def http(store: Store) -> Iterator[TestClient]:
    app = create_app(store, start_workers=False, status=CONFIG, clock=lambda: NOW)
    with TestClient(app) as client:
        yield client


def runs(db: Database) -> dict[str, int]:
    """Namespace "a": ingest, an auditor merge (3 s, tokens, 2 dropped items, 1 outside id,
    1 protected), a failed extractor run, an undo; namespace "b": one ingest."""
    start = NOW - 60 * MINUTE
    items = [MemoryIn(content=f"m{i}", timestamp=start + i * MINUTE) for i in range(3)]
    ids = db.writer.add_memories("a", items, now=start).ids
    db.writer.add_logs(
        "a", [LogIn(session_id="s", role="user", content="hi", timestamp=NOW)], now=NOW
    )
    stats = {
        "dropped": [{"item": "verdict 1", "reason": "superseded_by must be null"}] * 2,
        "dropped_ids": [999],
        "dropped_protected": 1,
        "protected_ids": [ids[2]],
        "quarantined": [ids[2]],
    }
    merged = db.writer.apply(
        "a",
        "auditor",
        [SetStatus(memory_id=ids[1], status=MemoryStatus.MERGED, replaced_by=ids[0])],
        now=NOW - 10 * MINUTE,
        info=RecordInfo(
            model="m",
            tokens_in=1000,
            tokens_out=200,
            cost=0.5,
            stats=stats,
            finished_at=NOW - 10 * MINUTE + timedelta(seconds=3),
        ),
        job_state={"exact_watermark": ids[2], "watermark": ids[0]},
        health={
            "last": {"status": "applied", "at": NOW.isoformat(), "record": 2, "message": "ok"},
            "quarantined": [ids[2]],
        },
    ).record_id
    assert merged is not None
    failed = db.writer.apply(
        "a",
        "extractor",
        (),
        now=NOW - 5 * MINUTE,
        info=RecordInfo(
            outcome=Outcome.FAILED,
            error="ValueError: bad",
            tokens_in=100,
            finished_at=NOW - 5 * MINUTE + timedelta(seconds=40),
        ),
        health={"failures": 1, "backoff_until": (NOW + 30 * MINUTE).isoformat()},
    ).record_id
    assert failed is not None
    undone = undo(db.writer, merged, now=NOW - MINUTE).record_id
    db.writer.add_memories("b", [MemoryIn(content="secret of b")], now=NOW)
    return {"merged": merged, "failed": failed, "undo": undone, "first": ids[0], "second": ids[1]}


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def test_status_endpoint_shows_key_namespaces_budget_and_jobs(
    http: TestClient, store: Store
) -> None:
    runs(store.db)
    response = http.get("/v1/status", headers=A)
    assert response.status_code == 200
    body = response.json()
    assert body["now"] == NOW.isoformat()
    assert body["daemon"] == {"running": False, "holder": None, "since": None, "expires_at": None}
    assert body["budget"]["max_tokens_per_day"] == 5000
    assert [space["namespace"] for space in body["namespaces"]] == ["a"]
    a = body["namespaces"][0]
    assert a["tokens_today"] == 1300
    assert a["cost_today"] == 0.5
    jobs = {job["job"]: job for job in a["jobs"]}
    assert jobs["extractor"]["failures"] == 1
    assert jobs["extractor"]["backing_off"] is True
    assert jobs["extractor"]["backlog"] == 1  # one log line past watermark 0
    assert jobs["auditor"]["backlog_by_watermark"] == {"exact_watermark": 0, "watermark": 2}
    assert jobs["auditor"]["quarantined"] == 1
    assert [entry["job"] for entry in body["schedule"]] == ["extractor", "auditor"]
    # Another key's namespace looks empty; no key is refused.
    assert http.get("/v1/status?namespace=b", headers=A).json()["namespaces"] == []
    assert http.get("/v1/status").status_code == 401


def test_status_endpoint_with_daemon_running(http: TestClient, store: Store) -> None:
    Lease(store.db.engine, holder="h:1:x", ttl=5 * MINUTE, clock=lambda: NOW - MINUTE).acquire()
    store.db.schedules.set_next_fire("auditor", NOW + 60 * MINUTE, now=NOW)
    body = http.get("/v1/status", headers=A).json()
    assert body["daemon"]["running"] is True
    assert body["daemon"]["holder"] == "h:1:x"
    assert body["daemon"]["since"] == (NOW - MINUTE).isoformat()
    auditor = next(entry for entry in body["schedule"] if entry["job"] == "auditor")
    assert auditor["next_fire_at"] == (NOW + 60 * MINUTE).isoformat()
    assert body["daemons"] == [
        {
            "holder": "h:1:x",
            "since": (NOW - MINUTE).isoformat(),
            "expires_at": (NOW + 4 * MINUTE).isoformat(),
            "holds": [],
        }
    ]
    assert body["night"] == {"in_progress": False, "firings": []}


def test_status_endpoint_shows_what_the_daemon_runs_in_the_key_namespaces_only(
    http: TestClient, store: Store
) -> None:
    runs(store.db)
    Lease(store.db.engine, holder="h:1:x", ttl=5 * MINUTE, clock=lambda: NOW - MINUTE).acquire()
    firings = store.db.firings
    key = "dream:3"
    firings.open(
        key, jobs=("extractor",), namespaces=["a", "b"], opened_by="h:1:x", now=NOW, manual=True
    )
    for _ in range(2):
        assert firings.claim(holder="h:1:x", now=NOW - MINUTE, ttl=5 * MINUTE) is not None
    body = http.get("/v1/status", headers=A).json()
    (daemon,) = body["daemons"]
    assert daemon["holds"] == [
        {
            "firing": key,
            "label": "dream request #3",
            "jobs": ["extractor"],
            "namespaces": ["a"],  # "b" is another key's: counted, not named
            "hidden": 1,
        }
    ]
    assert body["night"]["in_progress"] is True
    (firing,) = body["night"]["firings"]
    assert firing == {
        "key": key,
        "label": "dream request #3",
        "jobs": ["extractor"],
        "manual": True,
        "opened_at": NOW.isoformat(),
        "done": 0,
        "running": 2,
        "left": 0,
        "total": 2,
        "estimated_end": None,
    }


def test_records_list_has_the_run_fields_and_diff_endpoint_keeps_namespaces(
    http: TestClient, store: Store
) -> None:
    made = runs(store.db)
    listed = {r["id"]: r for r in http.get("/v1/records", headers=A).json()["records"]}
    merged = listed[made["merged"]]
    assert merged["duration_seconds"] == 3.0
    assert merged["changes_by_kind"]["merged"] == 1
    assert (merged["tokens_in"], merged["tokens_out"], merged["cost"]) == (1000, 200, 0.5)
    assert merged["status"] == "undone"
    failed = listed[made["failed"]]
    assert (failed["error"], failed["changes_by_kind"]) == ("ValueError: bad", {})
    shown = http.get(f"/v1/records/{made['merged']}", headers=A).json()
    assert (
        shown["dropped"][:2] == [{"item": "verdict 1", "reason": "superseded_by must be null"}] * 2
    )
    assert shown["dropped"][2] == {
        "item": "#999",
        "reason": "named by the reply but not sent to it",
    }
    assert shown["dropped"][3]["reason"].startswith("protected memories")
    assert len(shown["quarantined"]) == 1
    diff = http.get(f"/v1/records/{made['merged']}/diff", headers=A)
    assert diff.status_code == 200
    entry = diff.json()["entries"][0]
    assert entry["line"] == f'#{made["second"]} -> #{made["first"]}: "m0"'
    assert entry["into"] == {"id": made["first"], "text": "m0"}
    restored = http.get(f"/v1/records/{made['undo']}/diff", headers=A).json()
    assert restored["record"]["undoes_id"] == made["merged"]
    lines = [entry["line"] for entry in restored["entries"]]
    assert f'#{made["second"]} restored to active (was merged): "m1"' in lines
    other = store.db.records.find(namespaces=["b"])[0].id
    assert http.get(f"/v1/records/{other}/diff", headers=A).status_code == 404
    assert http.get("/v1/records/99999/diff", headers=A).status_code == 404
    assert http.get(f"/v1/records/{made['merged']}/diff").status_code == 401


def test_metrics_count_runs_durations_tokens_changes_drops_and_backlog(
    http: TestClient, store: Store
) -> None:
    made = runs(store.db)
    found = samples(http.get("/metrics").text)
    assert value(found, "secretary_job_runs_total", job="auditor", status="applied") == 1.0
    assert value(found, "secretary_job_runs_total", job="extractor", status="failed") == 1.0
    assert value(found, "secretary_job_runs_total", job="ingest", status="applied") == 2.0
    assert value(found, "secretary_job_runs_total", job="undo", status="applied") == 1.0
    bucket = "secretary_job_run_duration_seconds_bucket"
    assert value(found, bucket, job="auditor", le="1.0") == 0.0
    assert value(found, bucket, job="auditor", le="5.0") == 1.0
    assert value(found, bucket, job="extractor", le="15.0") == 0.0
    assert value(found, bucket, job="extractor", le="60.0") == 1.0
    assert value(found, "secretary_job_run_duration_seconds_sum", job="auditor") == 3.0
    assert value(found, "secretary_llm_tokens_total", job="auditor", direction="in") == 1000.0
    assert value(found, "secretary_llm_tokens_total", job="auditor", direction="out") == 200.0
    assert value(found, "secretary_llm_tokens_total", job="extractor", direction="in") == 100.0
    assert value(found, "secretary_llm_cost_total", job="auditor") == 0.5
    assert value(found, "secretary_changes_applied_total", job="auditor", kind="merged") == 1.0
    assert value(found, "secretary_changes_applied_total", job="undo", kind="reactivated") == 1.0
    assert value(found, "secretary_changes_applied_total", job="ingest", kind="created") == 4.0
    dropped = "secretary_items_dropped_total"
    assert value(found, dropped, job="auditor", reason="invalid") == 2.0
    assert value(found, dropped, job="auditor", reason="outside_batch") == 1.0
    assert value(found, dropped, job="auditor", reason="protected") == 1.0
    # Gauges, fresh at each scrape: backlogs of every namespace ("b" has one memory, no state).
    assert value(found, "secretary_job_backlog", job="extractor") == 1.0
    # "a": 2 active memories past the auditor's furthest-behind watermark; "b": its 1 memory.
    assert value(found, "secretary_job_backlog", job="auditor") == 2.0 + 1.0
    assert value(found, "secretary_job_quarantined", job="auditor") == 1.0
    assert value(found, "secretary_job_backing_off", job="extractor") == 1.0
    assert value(found, "secretary_daemon_running") == 0.0
    # A second scrape counts each record once; a new run adds to the counters.
    store.db.writer.apply(
        "a",
        "auditor",
        (),
        now=NOW,
        info=RecordInfo(outcome=Outcome.REFUSED, stats={"refused": "cap"}),
    )
    again = samples(http.get("/metrics").text)
    assert value(again, "secretary_job_runs_total", job="auditor", status="applied") == 1.0
    assert value(again, "secretary_job_runs_total", job="auditor", status="refused") == 1.0
    assert value(again, "secretary_changes_applied_total", job="auditor", kind="merged") == 1.0
    assert made["merged"] < made["undo"]


def test_record_fold_catches_up_in_bounded_pages(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_metrics, "PAGE", 2)
    monkeypatch.setattr(job_metrics, "PAGES", 1)
    for i in range(5):
        sqlite_db.writer.add_memories("a", [MemoryIn(content=f"m{i}")], now=NOW)
    fold = RecordFold()
    seen = []
    for _ in range(4):
        fold.update(sqlite_db.records, now=NOW)
        seen.append(fold.runs[("ingest", "applied")])
    assert seen == [2, 4, 5, 5]


@pytest.mark.postgres
def test_record_fold_picks_up_a_record_committed_after_a_later_one(
    postgres_engine: Engine,
) -> None:
    """PostgreSQL hands out ids before commit: a lower id may commit after a higher one."""
    from tests.conftest import truncate

    truncate(postgres_engine)
    db = Database(postgres_engine)
    fold = RecordFold()
    slow = RecordInfo(outcome=Outcome.FAILED, error="slow")
    with db.writer.unit("x", "linker", NOW, slow):
        db.writer.apply(
            "y",
            "extractor",
            [CreateMemory(key="k", content="c", type="event", event_time=NOW)],
            now=NOW,
        )
        fold.update(db.records, now=NOW)
        assert dict(fold.runs) == {("extractor", "applied"): 1}
        assert len(fold.missing) == 1
    fold.update(db.records, now=NOW + MINUTE)
    assert dict(fold.runs) == {("extractor", "applied"): 1, ("linker", "failed"): 1}
    assert fold.missing == {}
    # An id that never commits is given up on after the grace period.
    fold.missing[10_000] = NOW
    fold.update(db.records, now=NOW + job_metrics.GRACE)
    assert fold.missing == {}


def test_relation_metrics_by_kind(sqlite_db: Database) -> None:
    ids = sqlite_db.writer.add_memories(
        "a", [MemoryIn(content="x"), MemoryIn(content="y")], now=NOW
    ).ids
    sqlite_db.writer.apply(
        "a", "linker", [CreateRelation(source=ids[0], target=ids[1], type="causal", strength=1)],
        now=NOW,
    )  # fmt: skip
    fold = RecordFold()
    fold.update(sqlite_db.records, now=NOW)
    assert fold.changes[("linker", "relations_created")] == 1
