"""``status_json``: the status (``store.status``) as `secretary status --json`, GET /v1/status
and the console read it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from store.status import FiringStatus, Holding, JobStatus, Status


def status_json(status: Status) -> dict[str, Any]:
    daemon = status.daemon
    return {
        "now": status.now.isoformat(),
        "daemon": {
            "running": daemon.running,
            "holder": daemon.holder,
            "since": _iso(daemon.since),
            "expires_at": _iso(daemon.expires_at),
        },
        "daemons": [
            {
                "holder": running.holder,
                "since": _iso(running.since),
                "expires_at": _iso(running.expires_at),
                "holds": [_holding_json(held) for held in running.holds],
            }
            for running in status.daemons
        ],
        "night": {
            "in_progress": bool(status.firings),
            "firings": [_firing_json(firing) for firing in status.firings],
        },
        "budget": {
            "max_tokens_per_day": status.max_tokens_per_day,
            "known": status.max_tokens_per_day is not None,
            "day": status.now.date().isoformat(),
        },
        "schedule": [
            {
                "job": entry.job,
                "paused": entry.paused,
                "next_fire_at": _iso(entry.next_fire_at),
                "last_fired_at": _iso(entry.last_fired_at),
                "last_finished_at": _iso(entry.last_finished_at),
                "firing": entry.firing,
                "interrupted": entry.firing == "interrupted",
            }
            for entry in status.schedule
        ],
        "namespaces": [
            {
                "namespace": space.namespace,
                "tokens_today": space.tokens_today,
                "cost_today": space.cost_today,
                "budget_reached": space.budget_reached,
                "jobs": [_job_json(job) for job in space.jobs],
            }
            for space in status.namespaces
        ],
    }


def _holding_json(held: Holding) -> dict[str, Any]:
    return {
        "firing": held.firing,
        "label": held.label,
        "jobs": list(held.jobs),
        "namespaces": list(held.namespaces),
        "hidden": held.hidden,
    }


def _firing_json(firing: FiringStatus) -> dict[str, Any]:
    return {
        "key": firing.key,
        "label": firing.label,
        "jobs": list(firing.jobs),
        "manual": firing.manual,
        "opened_at": firing.opened_at.isoformat(),
        "done": firing.done,
        "running": firing.running,
        "left": firing.left,
        "total": firing.total,
        "estimated_end": _iso(firing.estimated_end),
    }


def _job_json(job: JobStatus) -> dict[str, Any]:
    return {
        "job": job.job,
        "last": dict(job.last) if job.last is not None else None,
        "failures": job.failures,
        "backoff_until": _iso(job.backoff_until),
        "backing_off": job.backing_off,
        "failing": job.failing,
        "quarantined": job.quarantined,
        "backlog": job.backlog_total,
        "backlog_by_watermark": dict(job.backlog) if job.backlog is not None else None,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
