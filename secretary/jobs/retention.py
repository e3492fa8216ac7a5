"""retention: purge tombstones (superseded, merged, archived) older than the undo window.

Until then every change that made them tombstones can be undone; after it, the rows go (with
their relations and timeline place) while the maintenance records stay. No LLM, no watermark:
tombstones are found by status and age, oldest first, at most the change cap per run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from secretary.jobs.base import Change, Job, JobContext, Plan
from store.models import Memory, MemoryStatus
from store.operations import Purge
from store.repository import Repository

TOMBSTONES = (MemoryStatus.SUPERSEDED.value, MemoryStatus.MERGED.value, MemoryStatus.ARCHIVED.value)
# Purges per run when the change cap is off.
_DEFAULT_LIMIT = 1000


def tombstones_before(
    repository: Repository, namespace: str, cutoff: datetime, limit: int
) -> list[int]:
    """Return ids of tombstones last changed before ``cutoff``, oldest first."""
    query = (
        select(Memory.id)
        .where(
            Memory.namespace == namespace,
            Memory.status.in_(TOMBSTONES),
            Memory.updated_at < cutoff,
        )
        .order_by(Memory.updated_at, Memory.id)
        .limit(limit)
    )
    with repository.reading() as session:
        return list(session.scalars(query))


class Retention(Job):
    name = "retention"

    def plan(self, ctx: JobContext) -> Plan:
        cutoff = ctx.now - timedelta(days=ctx.jobs.retention_undo_days)
        # Stay within the cap so that retention is never refused for its own backlog.
        limit = ctx.settings.guardrails.max_changes_per_run or _DEFAULT_LIMIT
        ids = tombstones_before(ctx.repository, ctx.namespace, cutoff, limit)
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=tuple(
                Change(label=f"purge #{i}", operations=(Purge(memory_id=i),)) for i in ids
            ),
            stats={"purged": len(ids), "cutoff": cutoff.isoformat()},
        )
