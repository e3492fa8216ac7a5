"""linker: new memories -> relations.

Associative edges come from embedding neighbours above a threshold, deterministically (no LLM);
typed causal/thematic edges come from the LLM, which sees each new memory with its neighbours.
The two parts keep their own watermarks so that associative links are made even while no model
is configured, and the typed part catches up once one is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prompts.linker_schema import LinkerReply
from prompts.render import RenderedPrompt, render
from secretary.jobs.base import LLM_NOT_CONFIGURED, Call, Change, Draft, MemoryJob, pack, split_ids
from secretary.jobs.clustering import Pair
from secretary.jobs.context import JobContext
from secretary.jobs.neighbours import neighbours
from secretary.jobs.prompt_data import listed_once, oldest_first
from store.kinds import RelationType
from store.operations import CreateRelation
from store.views import MemoryView

ASSOCIATIVE = RelationType.ASSOCIATIVE.value


def associative_edges(
    seeds: Sequence[int],
    edges: Iterable[Pair],
    *,
    max_per_memory: int,
    existing: set[tuple[int, int]],
) -> list[Pair]:
    """Pick each seed's strongest edges (at most ``max_per_memory``) that do not exist yet."""
    by_seed: dict[int, list[Pair]] = {seed: [] for seed in seeds}
    for edge in edges:
        for end in edge[:2]:
            if end in by_seed:
                by_seed[end].append(edge)
    chosen: dict[tuple[int, int], Pair] = {}
    for seed in sorted(by_seed):
        ranked = sorted(by_seed[seed], key=lambda e: (-e[2], e[0], e[1]))
        for edge in ranked[:max_per_memory]:
            if (edge[0], edge[1]) not in existing:
                chosen[(edge[0], edge[1])] = edge
    return sorted(chosen.values(), key=lambda e: (e[0], e[1]))


@dataclass(frozen=True, kw_only=True)
class Group:
    """New memories with their neighbours, judged together by the LLM.

    ``seeds`` are the new memories the group settles: its first member, and the new memories
    whose own group would have held nothing but members of this one.
    """

    seeds: tuple[int, ...]
    members: tuple[MemoryView, ...]

    @property
    def ids(self) -> set[int]:
        return {m.id for m in self.members}


def typed_groups(
    seeds: Sequence[MemoryView], edges: Sequence[Pair], views: Mapping[int, MemoryView], size: int
) -> list[Group]:
    """Return each seed with its strongest active neighbours (seeds without any are left out).

    A group whose members all belong to a larger group is folded into it: every relation it
    could propose can be proposed there, so sending it too would only repeat the question.
    """
    candidates: list[Group] = []
    for seed in seeds:
        near = [b if a == seed.id else a for a, b, _ in edges if seed.id in (a, b)]
        members = [seed, *(views[i] for i in near if i in views)][:size]
        if len(members) > 1:
            candidates.append(Group(seeds=(seed.id,), members=tuple(members)))
    kept: dict[int, Group] = {}  # by position in ``candidates``
    for position in sorted(range(len(candidates)), key=lambda n: -len(candidates[n].members)):
        group = candidates[position]
        home = next((n for n, k in kept.items() if group.ids <= k.ids), None)
        if home is None:
            kept[position] = group
        else:
            kept[home] = Group(seeds=kept[home].seeds + group.seeds, members=kept[home].members)
    return [kept[n] for n in sorted(kept)]


def typed_changes(
    batch: Sequence[Group], reply: LinkerReply, existing: set[tuple[int, int, str]], draft: Draft
) -> list[Change]:
    """Keep the proposed relations whose two ends are in one group of the batch."""
    sent = set().union(*(g.ids for g in batch))
    _, unknown = split_ids(reply.referenced_ids(), sent)
    draft.dropped.extend(unknown)
    changes: list[Change] = []
    for relation in reply.relations:
        ends = {relation.source_id, relation.target_id}
        key = (relation.source_id, relation.target_id, relation.type)
        if not any(ends <= g.ids for g in batch):
            draft.reject(
                f"{relation.type} #{relation.source_id} -> #{relation.target_id}",
                "its ends are not both in one group that was sent",
            )
            continue
        if key in existing:
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
    return changes


@dataclass(kw_only=True)
class Neighbourhood:
    """The new memories' active neighbours and the relations that exist among them."""

    edges: list[Pair]
    views: dict[int, MemoryView]
    present: set[tuple[int, int, str]]
    typed: int = 0


Batch = Sequence[Group]


class Linker(MemoryJob[Neighbourhood, Batch, LinkerReply]):
    name = "linker"
    summary = "new memories -> associative edges from embedding neighbours; causal/thematic edges"
    default_cron = "20 * * * *"
    uses_index = True
    deterministic_watermark = "watermark"
    llm_watermark = "typed_watermark"
    prompt_id = "linker"
    reply_schema = LinkerReply

    def wants_llm(self, ctx: JobContext) -> bool:
        return ctx.jobs.linker_typed

    def prepare(self, ctx: JobContext, new: Sequence[MemoryView]) -> Neighbourhood:
        config = ctx.jobs
        edges = neighbours(
            ctx.store,
            ctx.namespace,
            new,
            per_seed=max(config.linker_max_edges, 1),
            threshold=config.linker_threshold,
        )
        views = ctx.db.memories.active(ctx.namespace, {i for e in edges for i in e[:2]})
        present = {
            (e.source_id, e.target_id, e.type)
            for e in ctx.db.search.edges(ctx.namespace, [s.id for s in new])
        }
        kept = [e for e in edges if e[0] in views and e[1] in views]
        return Neighbourhood(edges=kept, views=views, present=present)

    def settle(
        self, ctx: JobContext, work: Neighbourhood, fresh: Sequence[MemoryView], draft: Draft
    ) -> None:
        seeds = [s.id for s in fresh]
        linked = associative_edges(
            seeds,
            work.edges,
            max_per_memory=ctx.jobs.linker_max_edges,
            existing={(min(s, t), max(s, t)) for s, t, ty in work.present if ty == ASSOCIATIVE},
        )
        draft.changes.extend(
            Change(
                label=f"associate #{a} #{b}",
                operations=(CreateRelation(source=a, target=b, type=ASSOCIATIVE, strength=s),),
            )
            for a, b, s in linked
        )
        draft.stats.update(new_memories=len(seeds), associative=len(linked))

    def skip(
        self, ctx: JobContext, work: Neighbourhood, new: Sequence[MemoryView], draft: Draft
    ) -> None:
        draft.skipped = LLM_NOT_CONFIGURED

    def calls(
        self, ctx: JobContext, work: Neighbourhood, fresh: Sequence[MemoryView], draft: Draft
    ) -> list[Call[Batch]]:
        size = ctx.jobs.linker_max_edges + 1
        groups = typed_groups(fresh, work.edges, work.views, size)
        return [
            Call(about=batch, ids=tuple(sorted(i for g in batch for i in g.seeds)))
            # A group is one question: a new memory with its neighbours (and the new memories
            # folded into it, whose questions it holds).
            for batch in pack(groups, ctx.jobs.batch_size, lambda g: g.seeds[:1])
        ]

    def shown(self, work: Neighbourhood, call: Call[Batch]) -> set[int]:
        return set().union(*(g.ids for g in call.about))

    def prompt(self, ctx: JobContext, work: Neighbourhood, call: Call[Batch]) -> RenderedPrompt:
        # Groups share neighbours: each memory is listed once, and a group is its ids, the new
        # memory first. Types are left out: relations are judged by content and time.
        memories = oldest_first(listed_once(g.members for g in call.about), with_type=False)
        groups = [[m.id for m in group.members] for group in call.about]
        return render(self.prompt_id, memories=memories, groups=groups)

    def collect(
        self,
        ctx: JobContext,
        work: Neighbourhood,
        call: Call[Batch],
        reply: LinkerReply,
        number: int,
        draft: Draft,
    ) -> None:
        made = typed_changes(call.about, reply, work.present, draft)
        draft.changes.extend(made)
        work.typed += len(made)

    def finish(
        self,
        ctx: JobContext,
        work: Neighbourhood,
        draft: Draft,
        answered: Sequence[tuple[Call[Batch], Any]],
    ) -> None:
        draft.stats["typed"] = work.typed
