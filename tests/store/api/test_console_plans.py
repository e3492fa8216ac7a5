"""The console's plans awaiting approval, decided through the secretary's ConsoleOps: a refused
approval is told as an error, not as a notice like an applied one (TestClient)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from secretary.console_ops import console_ops
from secretary.jobs.settings import JobsSettings
from secretary.runner import run_job
from store.api.app import create_app
from store.service import Store
from store.status import read_status
from store.status.shape import status_json
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
TEA = "a: I always drink green tea."


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    settings = Settings(data_dir=tmp_path, jobs=JobsSettings(approval="changes"))
    opened = Store.open(settings, create=True, embedder=FakeEmbedder())
    copies = [
        {"content": TEA, "type": "fact", "timestamp": f"2026-11-2{d}T09:00:00Z"} for d in "01"
    ]
    opened.add_memories("a", copies, now=NOW - timedelta(days=1))
    yield opened
    opened.close()


def _plan(store: Store) -> int:
    """The auditor's merge of the two copies, kept for approval (no model needed)."""
    settings = store.settings
    assert isinstance(settings, Settings)
    planned = run_job(store, settings, "auditor", "a", now=NOW - timedelta(hours=1))
    assert (planned.status, planned.record_id) != ("applied", None), planned.message
    assert planned.record_id is not None
    return planned.record_id


def _client(store: Store) -> TestClient:
    settings = store.settings
    assert isinstance(settings, Settings)
    ops = console_ops(store, settings)
    return TestClient(create_app(store, clock=lambda: NOW, start_workers=False, console=ops))


def _token(web: TestClient) -> str:
    return str(re.findall(r'name="csrf" value="([^"]+)"', web.get("/ui/plans").text)[0])


def _decide(web: TestClient, plan: int, decision: str, token: str) -> tuple[int, str]:
    response = web.post(f"/ui/plans/{plan}/{decision}", data={"csrf": token})
    return response.status_code, response.text


def test_console_stale_approval_is_an_error_saying_refused(store: Store) -> None:
    plan = _plan(store)
    (kept, *_) = store.db.memories.many("a", range(1, 10))
    store.edit("a", kept.id, {"importance": 3}, now=NOW)  # after the plan was made
    with _client(store) as web:
        status, page = _decide(web, plan, "approve", _token(web))
    assert status == 409
    refused = re.search(r'<p class="error"[^>]*>(.*?)</p>', page, re.S)
    assert refused is not None, page
    assert f"plan #{plan} was refused and nothing was applied" in refused.group(1)
    assert "changed since the plan was made" in refused.group(1)
    assert 'class="notice"' not in page
    assert store.db.records.get(plan)[0].status == "refused"


def test_console_approval_of_a_plan_no_longer_pending_is_an_error(store: Store) -> None:
    plan = _plan(store)
    with _client(store) as web:
        token = _token(web)  # the page shown before the rejection
        assert _decide(web, plan, "reject", token)[0] == 200  # the notice: "plan #N rejected"
        status, page = _decide(web, plan, "approve", token)
    assert status == 409
    assert f"no pending plan with record id {plan}" in page
    assert f'<a href="/ui/runs/{plan}">Run #{plan}</a> says what became of it' in page


def test_console_plan_buttons_name_their_plan(store: Store) -> None:
    plan = _plan(store)
    with _client(store) as web:
        page = web.get("/ui/plans").text
    assert f'aria-label="Approve plan #{plan}"' in page
    assert f'aria-label="Reject plan #{plan}"' in page


def _auditor_last(store: Store) -> dict[str, object]:
    (space,) = status_json(read_status(store.db, now=NOW))["namespaces"]
    (auditor,) = [job for job in space["jobs"] if job["job"] == "auditor"]
    return dict(auditor["last"])


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_status_tells_a_planned_last_run_as_its_plan_was_decided(
    store: Store, decision: str
) -> None:
    # Not "planned #N" (awaiting approval) once the plan was approved or rejected.
    plan = _plan(store)
    assert (_auditor_last(store)["status"], _auditor_last(store)["record"]) == ("planned", plan)
    with _client(store) as web:
        assert _decide(web, plan, decision, _token(web))[0] == 200
        status = web.get("/ui/status").text
    last = _auditor_last(store)
    if decision == "approve":
        applied_as = store.db.records.get(plan)[0].stats["applied_as"]
        assert (last["status"], last["applied_as"]) == ("applied", applied_as)
        assert f'as <a href="/ui/runs/{applied_as}">#{applied_as}</a>' in status
    else:
        assert (last["status"], last["message"]) == ("refused", "plan rejected")
    assert last["record"] == plan
    row = status.split('<td data-label="Job">auditor</td>')[1].split("</tr>")[0]
    assert "planned" not in row


def test_console_approved_plan_takes_its_planning_time_and_says_when_it_was_approved(
    store: Store,
) -> None:
    plan = _plan(store)  # planned an hour before the console's NOW
    with _client(store) as web:
        assert _decide(web, plan, "approve", _token(web))[0] == 200
        page = web.get(f"/ui/runs/{plan}").text
    took = page.split("took ")[1].split("<")[0]
    assert took.endswith(" s")  # the run's seconds, not the hour it waited (60.0 min)
    assert "<dt>Approved</dt><dd>2026-11-24 06:00 UTC: its changes were applied as run" in page
