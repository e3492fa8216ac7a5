"""retention: purge tombstones (superseded, merged, archived) older than the undo window.

Until then every change that made them tombstones can be undone; after it, the rows go (with
their relations and timeline place) and so does their text in every record's before/after
images, while the maintenance records stay (a diff says the text was purged). No LLM, no watermark:
tombstones are found by status and age, oldest first, at most the change cap per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from secretary.jobs.base import Change, Job, Plan
from secretary.jobs.context import JobContext
from store.operations import Purge

# Purges per run when the change cap is off.
_DEFAULT_LIMIT = 1000


class Retention(Job):
    name = "retention"
    summary = (
        "removes tombstones older than the undo window (30 days) and their text from records' "
        "images; records stay"
    )
    default_cron = "30 2 * * *"

    def parts(self, ctx: JobContext) -> Iterator[Plan]:
        cutoff = ctx.now - timedelta(days=ctx.jobs.retention_undo_days)
        # Stay within the cap so that retention is never refused for its own backlog.
        limit = ctx.guardrails.max_changes_per_run or _DEFAULT_LIMIT
        ids = ctx.db.memories.tombstones_before(ctx.namespace, cutoff, limit=limit)
        yield Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=tuple(
                Change(label=f"purge #{i}", operations=(Purge(memory_id=i),)) for i in ids
            ),
            stats={"purged": len(ids), "cutoff": cutoff.isoformat()},
        )
