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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prompts.consolidator_schema import ConsolidatorReply
from prompts.render import RenderedPrompt, render
from secretary.jobs.base import Call, Change, Draft, MemoryJob, is_trait, split_ids, tidy_tags
from secretary.jobs.clustering import Fragment, cluster_fragments
from secretary.jobs.context import JobContext
from secretary.jobs.prompt_data import oldest_first
from store.kinds import MemoryStatus, MemoryType, RelationType
from store.operations import CreateMemory, CreateRelation, InheritRelations, SetStatus
from store.views import MemoryView

FRAGMENT_TYPE = MemoryType.EVENT.value
# Older fragments read around the new ones, per new one, so that a cluster can take them in.
_POOL_FACTOR = 4


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
        read={m.id: m.version for m in ordered},
    )


@dataclass(kw_only=True)
class Episodes:
    """The settled new fragments' clusters, and what could not be summarised yet."""

    clusters: list[tuple[int, ...]]
    views: dict[int, MemoryView]
    settled: set[int]
    unsettled: list[int]
    too_small: int = 0
    summaries: list[Change] = field(default_factory=list)


Cluster = tuple[int, ...]


class Consolidator(MemoryJob[Episodes, Cluster, ConsolidatorReply]):
    name = "consolidator"
    summary = "temporally close, similar event fragments -> one interaction_summary in their place"
    default_cron = "0 3 * * *"
    prompt_id = "consolidator"
    reply_schema = ConsolidatorReply
    memory_types = (FRAGMENT_TYPE,)

    def prepare(self, ctx: JobContext, new: Sequence[MemoryView]) -> Episodes:
        window = timedelta(minutes=ctx.jobs.consolidator_window_minutes)
        settled_until = ctx.now - window
        settled = [m for m in new if m.event_time <= settled_until]
        clusters, views = self._clusters(ctx, settled, window, settled_until)
        return Episodes(
            clusters=clusters,
            views=views,
            settled={m.id for m in settled},
            unsettled=[m.id for m in new if m.event_time > settled_until],
        )

    def skip(
        self, ctx: JobContext, work: Episodes, new: Sequence[MemoryView], draft: Draft
    ) -> None:
        # Clusters are found but left alone: a summary needs the LLM.
        draft.skipped = "LLM not configured"
        draft.stats["clusters"] = len(work.clusters)

    def calls(
        self, ctx: JobContext, work: Episodes, fresh: Sequence[MemoryView], draft: Draft
    ) -> list[Call[Cluster]]:
        return [
            Call(about=cluster, ids=tuple(i for i in cluster if i in work.settled))
            for cluster in work.clusters
        ]

    def shown(self, work: Episodes, call: Call[Cluster]) -> set[int]:
        return set(call.about)

    def prompt(self, ctx: JobContext, work: Episodes, call: Call[Cluster]) -> RenderedPrompt:
        # Every fragment is an event: its type would tell the model nothing.
        fragments = oldest_first((work.views[i] for i in call.about), with_type=False)
        return render(self.prompt_id, fragments=fragments)

    def collect(
        self,
        ctx: JobContext,
        work: Episodes,
        call: Call[Cluster],
        reply: ConsolidatorReply,
        number: int,
        draft: Draft,
    ) -> None:
        known, unknown = split_ids(reply.source_ids, call.about)
        draft.dropped.extend(unknown)
        if len(known) < ctx.jobs.consolidator_min_fragments:
            work.too_small += 1
            draft.reject(
                f"summary of {list(call.about)}",
                f"covers {len(known)} fragment(s) that were sent, fewer than"
                f" consolidator_min_fragments ({ctx.jobs.consolidator_min_fragments})",
            )
            return
        fragments = [work.views[i] for i in sorted(known)]
        draft.changes.append(summary_change(f"s{number}", reply, fragments))

    def finish(
        self,
        ctx: JobContext,
        work: Episodes,
        draft: Draft,
        answered: Sequence[tuple[Call[Cluster], Any]],
    ) -> None:
        draft.stats.update(
            clusters=len(work.clusters),
            summaries=len(draft.changes),
            clusters_too_small=work.too_small,
            unsettled=len(work.unsettled),
        )

    def unfinished(self, ctx: JobContext, work: Episodes) -> list[int]:
        # Fragments whose window has not passed yet: the episode may still be going on.
        return work.unsettled

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
        pool = [
            m
            for m in ctx.db.memories.between(
                ctx.namespace,
                FRAGMENT_TYPE,
                min(m.event_time for m in settled) - window,
                min(max(m.event_time for m in settled) + window, settled_until),
                limit=len(settled) * _POOL_FACTOR + config.consolidator_max_fragments,
            )
            if not is_trait(m)
        ]
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
