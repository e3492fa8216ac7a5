"""The JSON of a dream request (POST /v1/dream, `secretary dream`): GET /v1/dream/{id} shows
``request_json``; the console's status page shows each run with ``run_json`` and its tone."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from store.coordination.dream_requests import DreamRequestView


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def request_json(request: DreamRequestView) -> dict[str, Any]:
    """A dream request as the API shows it."""
    return {
        "id": request.id,
        "namespace": request.namespace,
        "jobs": list(request.jobs),
        "retry_quarantined": request.retry_quarantined,
        "requested_by": request.requested_by,
        "requested_at": request.requested_at.isoformat(),
        "status": request.status,
        "picked_by": request.picked_by,
        "started_at": _iso(request.started_at),
        "finished_at": _iso(request.finished_at),
        "outcomes": [outcome_json(outcome) for outcome in request.outcomes],
        "error": request.error,
    }


def outcome_json(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """One run of a request, as stored by whoever ran it."""
    return {
        "job": str(outcome.get("job", "")),
        "namespace": str(outcome.get("namespace", "")),
        "status": str(outcome.get("status", "")),
        "record_id": outcome.get("record_id"),
        "records": list(outcome.get("records") or []),
        "message": str(outcome.get("message") or ""),
    }


def run_json(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """One run of a request as the console's status page shows it (and its script)."""
    status, message = str(outcome.get("status") or ""), str(outcome.get("message") or "")
    return {
        "job": str(outcome.get("job") or ""),
        "status": status,
        "record_id": outcome.get("record_id"),
        "message": message,
        "tone": run_tone(status, message),
    }


def run_tone(status: str, message: str) -> str:
    """How a run's badge looks: bad (failed), warn (it dropped what it got, was refused or did
    not run now), good (applied), else plain."""
    if status == "failed":
        return "bad"
    if status in ("refused", "skipped") or message.startswith("applied nothing"):
        return "warn"
    return "good" if status == "applied" else "plain"
