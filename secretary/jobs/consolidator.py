"""consolidator: temporally close, similar event fragments -> one interaction summary.

Clustering is deterministic (``clustering.cluster_fragments``); the LLM only writes each
cluster's summary. The summary carries the fragments' time span (its event time is the earliest
fragment's, never "now"), takes their place in the timeline, inherits their relations and is
``derived_from`` them; the fragments become ``merged`` with ``replaced_by`` the summary. The
outbox then indexes the summary and drops the fragments from the vector index.

Only fragments whose window has passed are consolidated, so an episode still going on is not
summarised half-way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select

from prompts.consolidator_schema import ConsolidatorReply
from prompts.render import render
from secretary.jobs.base import (
    Change,
    Job,
    JobContext,
    MemoryView,
    Plan,
    advance,
    ask_each,
    dropped_note,
    memories_after,
    tidy_tags,
)
from secretary.jobs.clustering import Fragment, cluster_fragments
from secretary.jobs.guardrails import split_ids
from store.models import Memory, MemoryStatus, MemoryType, RelationType
from store.operations import CreateMemory, CreateRelation, InheritRelations, SetStatus
from store.repository import Repository

FRAGMENT_TYPE = MemoryType.EVENT.value
# Older fragments read around the new ones, per new one, so that a cluster can take them in.
_POOL_FACTOR = 4


def events_between(
    repository: Repository, namespace: str, start: datetime, end: datetime, limit: int
) -> list[MemoryView]:
    """Return the active events with start <= event_time <= end, in time order."""
    query = (
        select(Memory)
        .where(
            Memory.namespace == namespace,
            Memory.status == MemoryStatus.ACTIVE.value,
            Memory.type == FRAGMENT_TYPE,
            Memory.event_time >= start,
            Memory.event_time <= end,
        )
        .order_by(Memory.event_time, Memory.id)
        .limit(limit)
    )
    with repository.reading() as session:
        return [v for v in map(MemoryView.of, session.scalars(query)) if not v.is_trait]


def fragment_for_prompt(memory: MemoryView) -> dict[str, object]:
    return {
        "id": memory.id,
        "time": memory.event_time.isoformat(),
        "type": memory.type,
        "content": memory.content,
    }


def summary_change(key: str, reply: ConsolidatorReply, fragments: Sequence[MemoryView]) -> Change:
    """The summary replacing ``fragments``, with its span, links and the fragments' new status."""
    ordered = sorted(fragments, key=lambda m: (m.event_time, m.id))
    ids = tuple(m.id for m in ordered)
    sessions = {m.session_id for m in ordered}
    start, end = ordered[0].event_time, max(m.event_time for m in ordered)
    create = CreateMemory(
        key=key,
        content=reply.summary.strip(),
        type=MemoryType.INTERACTION_SUMMARY.value,
        event_time=start,
        importance=reply.importance,
        tags=tidy_tags(reply.tags),
        session_id=sessions.pop() if len(sessions) == 1 else None,
        metadata={
            "span_start": start.isoformat(),
            "span_end": end.isoformat(),
            "fragment_ids": list(ids),
        },
        source="consolidator",
        replaces_in_timeline=ids,
    )
    derived = tuple(
        CreateRelation(source=key, target=i, type=RelationType.DERIVED_FROM.value, strength=1.0)
        for i in ids
    )
    merged = tuple(SetStatus(memory_id=i, status=MemoryStatus.MERGED, replaced_by=key) for i in ids)
    return Change(
        label=f"summarise {list(ids)}",
        operations=(create, InheritRelations(from_ids=ids, to=key), *derived, *merged),
    )


class Consolidator(Job):
    name = "consolidator"

    def plan(self, ctx: JobContext) -> Plan:
        config = ctx.jobs
        watermark = ctx.watermark()
        window = timedelta(minutes=config.consolidator_window_minutes)
        new = memories_after(
            ctx.repository,
            ctx.namespace,
            watermark,
            limit=config.max_items_per_run,
            types=(FRAGMENT_TYPE,),
        )
        if not new:
            return self.empty_plan(ctx)
        settled_until = ctx.now - window
        settled = [m for m in new if m.event_time <= settled_until]
        unsettled = [m.id for m in new if m.event_time > settled_until]
        clusters, views = self._clusters(ctx, settled, window, settled_until)
        if not ctx.llm.available:
            # Clusters are found but left alone: a summary needs the LLM.
            return self.empty_plan(
                ctx, skipped="LLM not configured", stats={"clusters": len(clusters)}
            )
        answered, stopped = ask_each(
            ctx.llm,
            clusters,
            lambda cluster: ctx.llm.ask(
                render("consolidator", fragments=[fragment_for_prompt(views[i]) for i in cluster]),
                ConsolidatorReply,
            ),
        )
        changes: list[Change] = []
        dropped: list[int] = []
        too_small = 0
        for number, (cluster, reply) in enumerate(answered):
            known, unknown = split_ids(reply.source_ids, cluster)
            dropped.extend(unknown)
            if len(known) < config.consolidator_min_fragments:
                too_small += 1
                continue
            changes.append(summary_change(f"s{number}", reply, [views[i] for i in sorted(known)]))
        settled_ids = {m.id for m in settled}
        left = [i for cluster in clusters[len(answered) :] for i in cluster if i in settled_ids]
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=tuple(changes),
            job_state={
                **ctx.state,
                "watermark": advance(watermark, [m.id for m in new], [*left, *unsettled]),
            },
            stats={
                "clusters": len(clusters),
                "summaries": len(changes),
                "clusters_too_small": too_small,
                "unsettled": len(unsettled),
                "dropped_ids": dropped_note(self.name, dropped),
            },
            stopped=stopped,
        )

    def _clusters(
        self,
        ctx: JobContext,
        settled: Sequence[MemoryView],
        window: timedelta,
        settled_until: datetime,
    ) -> tuple[list[tuple[int, ...]], dict[int, MemoryView]]:
        """Cluster the settled new fragments with their settled neighbours in time."""
        if not settled:
            return [], {}
        config = ctx.jobs
        pool = events_between(
            ctx.repository,
            ctx.namespace,
            min(m.event_time for m in settled) - window,
            min(max(m.event_time for m in settled) + window, settled_until),
            limit=len(settled) * _POOL_FACTOR + config.consolidator_max_fragments,
        )
        views = {m.id: m for m in [*pool, *settled]}
        ordered = sorted(views.values(), key=lambda m: (m.event_time, m.id))
        vectors = ctx.store.embedder.embed([m.content for m in ordered])
        clusters = cluster_fragments(
            [
                Fragment(id=m.id, event_time=m.event_time, embedding=v)
                for m, v in zip(ordered, vectors, strict=True)
            ],
            window=window,
            threshold=config.consolidator_threshold,
            min_size=config.consolidator_min_fragments,
            max_size=config.consolidator_max_fragments,
        )
        new_ids = {m.id for m in settled}
        return [c for c in clusters if new_ids & set(c)], views
