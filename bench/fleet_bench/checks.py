"""What the store says after a night: the firing's units, what the extractor left, duplicates,
the records' tokens.

Read-only SQL over the store's tables (``store.models``), in a few aggregate queries rather than
a read per namespace: at 10,000 namespaces the per-namespace reads of ``store.db`` would take
longer than the night.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select

from store.models import (
    ConversationLog,
    DreamRequest,
    Firing,
    FiringUnit,
    JobState,
    MaintenanceRecord,
    Memory,
)

DONE = "done"


def firing_of(engine: Engine, request_id: int) -> Firing | None:
    """The firing a dream request was cut into (key ``dream:<id>``), or None before it opens."""
    with engine.connect() as connection:
        row = connection.execute(
            select(Firing.id, Firing.key, Firing.opened_at, Firing.finished_at).where(
                Firing.key == f"dream:{request_id}"
            )
        ).first()
    return row  # type: ignore[return-value]


def unit_states(engine: Engine, firing_id: int) -> list[Any]:
    """Every unit: id, namespace, state, holder, lease_until, claims, finished_at."""
    with engine.connect() as connection:
        return list(
            connection.execute(
                select(
                    FiringUnit.id,
                    FiringUnit.namespace,
                    FiringUnit.state,
                    FiringUnit.holder,
                    FiringUnit.lease_until,
                    FiringUnit.claims,
                    FiringUnit.started_at,
                    FiringUnit.finished_at,
                ).where(FiringUnit.firing_id == firing_id)
            )
        )


def request_row(engine: Engine, request_id: int) -> Any:
    with engine.connect() as connection:
        return connection.execute(
            select(
                DreamRequest.status,
                DreamRequest.picked_by,
                DreamRequest.requested_at,
                DreamRequest.started_at,
                DreamRequest.finished_at,
                DreamRequest.error,
            ).where(DreamRequest.id == request_id)
        ).first()


def units_report(engine: Engine, firing_id: int) -> dict[str, Any]:
    """Units by state, taken over (claims > 1), and their outcomes' statuses by job."""
    with engine.connect() as connection:
        rows = list(
            connection.execute(
                select(
                    FiringUnit.namespace,
                    FiringUnit.state,
                    FiringUnit.claims,
                    FiringUnit.holder,
                    FiringUnit.outcomes,
                ).where(FiringUnit.firing_id == firing_id)
            )
        )
    statuses: Counter[str] = Counter()
    repeated_jobs = 0  # units whose outcomes name a job twice
    for row in rows:
        jobs = Counter(str(o.get("job")) for o in row.outcomes or ())
        repeated_jobs += any(n > 1 for n in jobs.values())
        statuses.update(f"{o.get('job')}:{o.get('status')}" for o in row.outcomes or ())
    return {
        "total": len(rows),
        "by_state": dict(Counter(row.state for row in rows)),
        "not_done": sorted(row.namespace for row in rows if row.state != DONE),
        "claimed_more_than_once": sorted(row.namespace for row in rows if row.claims > 1),
        "outcomes_naming_a_job_twice": repeated_jobs,
        "holders": dict(Counter(_pid(row.holder) for row in rows)),
        "outcomes": dict(sorted(statuses.items())),
    }


def _pid(holder: str | None) -> str:
    """``host:pid:uuid`` -> ``pid`` (the daemons all run on this host)."""
    return (holder or "none").split(":")[1] if holder and holder.count(":") >= 2 else str(holder)


def extraction_report(engine: Engine, expected: Mapping[str, int]) -> dict[str, Any]:
    """Per namespace, lines the extractor has not passed and memories it made against
    ``expected`` (namespace -> memories the scripted extractor makes of its lines); log lines
    two extractor memories (of any status) name as their source: extracted twice."""
    with engine.connect() as connection:
        newest_line = dict(
            connection.execute(
                select(ConversationLog.namespace, func.max(ConversationLog.id)).group_by(
                    ConversationLog.namespace
                )
            ).all()
        )
        watermarks = {
            row.namespace: int((row.state or {}).get("watermark", 0) or 0)
            for row in connection.execute(
                select(JobState.namespace, JobState.state).where(JobState.job == "extractor")
            )
        }
        made: Counter[str] = Counter()
        per_line: Counter[tuple[str, int]] = Counter()
        for ns, meta in connection.execute(
            select(Memory.namespace, Memory.metadata_).where(Memory.source == "extractor")
        ):
            made[ns] += 1
            lines = (meta or {}).get("source_log_ids", ())
            per_line.update((ns, int(line)) for line in lines)
    twice = [key for key, times in per_line.items() if times > 1]
    behind = sorted(ns for ns, newest in newest_line.items() if watermarks.get(ns, 0) < newest)
    short = {
        ns: (made.get(ns, 0), want) for ns, want in expected.items() if made.get(ns, 0) != want
    }
    return {
        "namespaces_with_lines": len(newest_line),
        "namespaces_with_lines_left": len(behind),
        "lines_left_in": behind[:20],
        "memories_made": sum(made.values()),
        "memories_expected": sum(expected.values()),
        "namespaces_with_other_count": len(short),
        "other_counts": dict(list(sorted(short.items()))[:20]),
        "lines_extracted_twice": len(twice),
        "namespaces_extracted_twice": sorted({ns for ns, _ in twice}),
    }


def line_owners(engine: Engine) -> dict[int, str]:
    """Log line id -> namespace."""
    with engine.connect() as connection:
        return dict(connection.execute(select(ConversationLog.id, ConversationLog.namespace)).all())


def records_report(engine: Engine, since: datetime) -> dict[str, Any]:
    """The maintenance records the night wrote: by job and status, and their tokens."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(
                MaintenanceRecord.job,
                MaintenanceRecord.status,
                func.count(),
                func.sum(MaintenanceRecord.tokens_in),
                func.sum(MaintenanceRecord.tokens_out),
            )
            .where(MaintenanceRecord.started_at >= since)
            .group_by(MaintenanceRecord.job, MaintenanceRecord.status)
        ).all()
    return {
        "by_job": {f"{job}:{status}": count for job, status, count, _, _ in rows},
        "tokens_in": int(sum(t or 0 for *_, t, _ in rows)),
        "tokens_out": int(sum(t or 0 for *_, t in rows)),
    }
