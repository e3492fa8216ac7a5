"""linker: new memories -> relations.

Associative edges come from embedding neighbours above a threshold, deterministically (no LLM);
typed causal/thematic edges come from the LLM, which sees each new memory with its neighbours.
The two parts keep their own watermarks so that associative links are made even while no model
is configured, and the typed part catches up once one is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prompts.linker_schema import LinkerReply
from prompts.render import render
from secretary.jobs.base import (
    Change,
    Job,
    JobContext,
    MemoryView,
    Plan,
    active_views,
    advance,
    ask_each,
    dropped_note,
    memories_after,
    neighbours,
)
from secretary.jobs.clustering import Edge
from secretary.jobs.guardrails import split_ids
from store.models import RelationType
from store.operations import CreateRelation

ASSOCIATIVE = RelationType.ASSOCIATIVE.value


def associative_edges(
    seeds: Sequence[int],
    edges: Iterable[Edge],
    *,
    max_per_memory: int,
    existing: set[tuple[int, int]],
) -> list[Edge]:
    """Pick each seed's strongest edges (at most ``max_per_memory``) that do not exist yet."""
    by_seed: dict[int, list[Edge]] = {seed: [] for seed in seeds}
    for edge in edges:
        for end in edge[:2]:
            if end in by_seed:
                by_seed[end].append(edge)
    chosen: dict[tuple[int, int], Edge] = {}
    for seed in sorted(by_seed):
        ranked = sorted(by_seed[seed], key=lambda e: (-e[2], e[0], e[1]))
        for edge in ranked[:max_per_memory]:
            if (edge[0], edge[1]) not in existing:
                chosen[(edge[0], edge[1])] = edge
    return sorted(chosen.values(), key=lambda e: (e[0], e[1]))


@dataclass(frozen=True, kw_only=True)
class Group:
    """A new memory with its neighbours, judged together by the LLM."""

    seed: int
    members: tuple[MemoryView, ...]

    @property
    def ids(self) -> set[int]:
        return {m.id for m in self.members}


def typed_groups(
    seeds: Sequence[MemoryView], edges: Sequence[Edge], views: Mapping[int, MemoryView], size: int
) -> list[Group]:
    """Return each seed with its strongest active neighbours (seeds without any are left out)."""
    groups: list[Group] = []
    seen: set[frozenset[int]] = set()
    for seed in seeds:
        near = [b if a == seed.id else a for a, b, _ in edges if seed.id in (a, b)]
        members = [seed, *(views[i] for i in near if i in views)][:size]
        key = frozenset(m.id for m in members)
        if len(members) > 1 and key not in seen:
            seen.add(key)
            groups.append(Group(seed=seed.id, members=tuple(members)))
    return groups


def pack(groups: Sequence[Group], per_call: int) -> list[list[Group]]:
    """Put whole groups into calls of about ``per_call`` memories each."""
    calls: list[list[Group]] = []
    count = 0
    for group in groups:
        if calls and count + len(group.members) <= per_call:
            calls[-1].append(group)
            count += len(group.members)
        else:
            calls.append([group])
            count = len(group.members)
    return calls


def typed_changes(
    batch: Sequence[Group], reply: LinkerReply, existing: set[tuple[int, int, str]]
) -> tuple[list[Change], list[int]]:
    """Keep the proposed relations whose two ends are in one group of the batch."""
    sent = set().union(*(g.ids for g in batch))
    _, unknown = split_ids(reply.referenced_ids(), sent)
    changes: list[Change] = []
    for relation in reply.relations:
        ends = {relation.source_id, relation.target_id}
        key = (relation.source_id, relation.target_id, relation.type)
        if not any(ends <= g.ids for g in batch) or key in existing:
            continue
        existing.add(key)
        changes.append(
            Change(
                label=f"{relation.type} #{relation.source_id} -> #{relation.target_id}",
                operations=(
                    CreateRelation(
                        source=relation.source_id,
                        target=relation.target_id,
                        type=relation.type,
                        strength=relation.strength,
                        description=relation.description.strip(),
                    ),
                ),
            )
        )
    return changes, sorted(unknown)


class Linker(Job):
    name = "linker"
    uses_index = True

    def plan(self, ctx: JobContext) -> Plan:
        config = ctx.jobs
        watermark = ctx.watermark()
        typed_mark = ctx.watermark("typed_watermark")
        typed_on = config.linker_typed and ctx.llm.available
        start = min(watermark, typed_mark) if typed_on else watermark
        seeds = memories_after(ctx.repository, ctx.namespace, start, limit=config.max_items_per_run)
        if not seeds:
            return self.empty_plan(ctx)
        edges = neighbours(
            ctx.store,
            ctx.namespace,
            seeds,
            per_seed=max(config.linker_max_edges, 1),
            threshold=config.linker_threshold,
        )
        views = active_views(ctx.repository, ctx.namespace, {i for e in edges for i in e[:2]})
        edges = [e for e in edges if e[0] in views and e[1] in views]
        present = {
            (e.source_id, e.target_id, e.type)
            for e in ctx.repository.edges(ctx.namespace, [s.id for s in seeds])
        }
        assoc_seeds = [s.id for s in seeds if s.id > watermark]
        linked = associative_edges(
            assoc_seeds,
            edges,
            max_per_memory=config.linker_max_edges,
            existing={(min(s, t), max(s, t)) for s, t, ty in present if ty == ASSOCIATIVE},
        )
        changes = [
            Change(
                label=f"associate #{a} #{b}",
                operations=(CreateRelation(source=a, target=b, type=ASSOCIATIVE, strength=s),),
            )
            for a, b, s in linked
        ]
        state = {**ctx.state, "watermark": advance(watermark, assoc_seeds)}
        stats: dict[str, object] = {"new_memories": len(assoc_seeds), "associative": len(linked)}
        stopped = None
        if typed_on:
            typed_seeds = [s for s in seeds if s.id > typed_mark]
            groups = typed_groups(typed_seeds, edges, views, config.linker_max_edges + 1)
            calls = pack(groups, config.batch_size)
            answered, stopped = ask_each(
                ctx.llm,
                calls,
                lambda batch: ctx.llm.ask(
                    render("linker", groups=[[m.for_prompt() for m in g.members] for g in batch]),
                    LinkerReply,
                ),
            )
            dropped: list[int] = []
            typed = 0
            for batch, reply in answered:
                made, unknown = typed_changes(batch, reply, present)
                changes.extend(made)
                dropped.extend(unknown)
                typed += len(made)
            left = [g.seed for batch in calls[len(answered) :] for g in batch]
            state["typed_watermark"] = advance(typed_mark, [s.id for s in typed_seeds], left)
            stats |= {"typed": typed, "dropped_ids": dropped_note(self.name, dropped)}
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=tuple(changes),
            job_state=state,
            stats=stats,
            skipped=None if typed_on or not config.linker_typed else "LLM not configured",
            stopped=stopped,
        )
