"""`secretary dream` waiting for the daemon: each run's line printed once, whatever the order in
which the units store them, and a database that does not answer for a while outlasted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from secretary import cli_jobs
from store.coordination.dream_requests import DreamRequests, DreamRequestView
from store.database import Database
from tests.helpers.db_faults import cut

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


def outcome(namespace: str, job: str) -> dict[str, Any]:
    return {
        "job": job,
        "namespace": namespace,
        "status": "applied",
        "record_id": None,
        "records": [],
        "message": f"{job} on {namespace}",
    }


def view(outcomes: Sequence[Mapping[str, Any]], *, done: bool = False) -> DreamRequestView:
    return DreamRequestView(
        id=1,
        namespace=None,
        jobs=(),
        retry_quarantined=False,
        requested_by="test",
        requested_at=T0,
        status="done" if done else "running",
        picked_by="daemon-a",
        started_at=T0,
        finished_at=T0 if done else None,
        outcomes=tuple(outcomes),
        error=None,
    )


class Scripted:
    """The request as the daemon stores it, one look after another."""

    def __init__(self, views: list[DreamRequestView]) -> None:
        self._views = views

    def get(self, request_id: int) -> DreamRequestView:
        return self._views.pop(0) if len(self._views) > 1 else self._views[0]

    def picker_alive(self, picker: str, *, now: datetime) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_jobs, "WAIT_POLL_SECONDS", 0.0)


def test_each_run_is_printed_once_though_a_unit_stores_its_next_run_before_those_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The daemon stores the outcomes unit by unit: ana's second run comes in before ben's
    # first, which was printed already (a night had lines twice and others never).
    ana1, ana2, ben1, ben2 = (outcome(ns, job) for ns in ("ana", "ben") for job in ("x", "y"))
    requests = Scripted(
        [
            view([ana1]),
            view([ana1, ben1]),
            view([ana1, ana2, ben1]),
            view([ana1, ana2, ben1, ben2], done=True),
        ]
    )

    request = cli_jobs._wait(None, requests, 1)  # type: ignore[arg-type]

    assert request.finished
    assert capsys.readouterr().out.splitlines() == [
        "ana x: applied: x on ana",
        "ben x: applied: x on ben",
        "ana y: applied: y on ana",
        "ben y: applied: y on ben",
    ]


class CutRequests(DreamRequests):
    """Reads whose connection is cut, ``cuts`` times (then every time, if ``cuts`` < 0)."""

    cuts = 3

    def get(self, request_id: int) -> DreamRequestView | None:
        if self.cuts:
            self.cuts -= 1
            cut(self.engine)
        return super().get(request_id)


def finished_request(db: Database) -> int:
    requests = db.dream_requests
    request_id = requests.enqueue(
        namespace="maya", jobs=("auditor",), retry_quarantined=False, requested_by="t", now=T0
    )
    assert requests.claim(picker="daemon-a", now=T0) is not None
    assert requests.finish(
        request_id, picker="daemon-a", outcomes=[outcome("maya", "auditor")], now=T0
    )
    return request_id


def test_waiting_outlasts_a_database_cut_for_a_while(
    db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = finished_request(db)
    requests = CutRequests(db.engine)

    request = cli_jobs._wait(None, requests, request_id)

    assert requests.cuts == 0
    assert request.status == "done"
    assert capsys.readouterr().out.splitlines() == ["maya auditor: applied: auditor on maya"]


def test_waiting_gives_up_on_a_database_down_for_longer(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_jobs, "WAIT_DOWN_SECONDS", 0.0)
    request_id = finished_request(db)
    requests = CutRequests(db.engine)
    requests.cuts = -1

    with pytest.raises(OperationalError):
        cli_jobs._wait(None, requests, request_id)
