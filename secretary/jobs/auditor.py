"""auditor: duplicates, contradictions, hallucinations and stale preferences among new memories.

Deterministic first: exact duplicates (same content hash; for events also the same time) are
merged without asking the LLM. The rest is grouped (near duplicates by embedding similarity,
preferences on the same subject) and only those groups are judged by the LLM. Outcomes are
supersede, merge or archive, never a delete. Traits belong to the soul mapper and are left out.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from prompts.auditor_schema import AuditorReply, Verdict
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
from secretary.jobs.clustering import Edge, capped_groups, groups_by_key
from store.models import Memory, MemoryStatus, MemoryType
from store.operations import InheritRelations, Operation, SetStatus, UpdateMemory
from store.repository import Repository

# Types whose identical text at another time is another occurrence, not a duplicate.
_TIMED = frozenset({MemoryType.EVENT, MemoryType.INTERACTION_SUMMARY, MemoryType.TOOL_EXPERIENCE})
# Preferences read to find ones on the same subject as a new one.
_MAX_PREFERENCES = 1000

Group = tuple[MemoryView, ...]


def duplicate_key(memory: MemoryView) -> Hashable:
    """Memories with equal keys say exactly the same thing."""
    when = memory.event_time if memory.type in _TIMED else None
    return (memory.content_hash, memory.type, when)


def keeper_of(group: Sequence[MemoryView]) -> MemoryView:
    """The duplicate that stays: pinned first, then the most important, then the oldest."""
    return min(group, key=lambda m: (not m.pinned, -m.importance, m.id))


def exact_duplicate_changes(
    seeds: Sequence[MemoryView], candidates: Iterable[MemoryView]
) -> list[Change]:
    """Merge every exact duplicate of a seed into its keeper (one change per duplicate)."""
    pool = {m.id: m for m in [*candidates, *seeds] if not m.is_trait}
    seed_ids = {s.id for s in seeds}
    changes: list[Change] = []
    for ids in groups_by_key((m.id, duplicate_key(m)) for m in pool.values()):
        if not seed_ids & set(ids):
            continue
        keeper = keeper_of([pool[i] for i in ids])
        for dup in ids:
            if dup == keeper.id:
                continue
            changes.append(
                Change(
                    label=f"merge exact duplicate #{dup} into #{keeper.id}",
                    operations=(
                        InheritRelations(from_ids=(dup,), to=keeper.id),
                        SetStatus(memory_id=dup, status=MemoryStatus.MERGED, replaced_by=keeper.id),
                    ),
                )
            )
    return changes


def same_hash(repository: Repository, namespace: str, hashes: Iterable[str]) -> list[MemoryView]:
    wanted = sorted(set(hashes))
    if not wanted:
        return []
    query = select(Memory).where(
        Memory.namespace == namespace,
        Memory.status == MemoryStatus.ACTIVE.value,
        Memory.content_hash.in_(wanted),
    )
    with repository.reading() as session:
        return [MemoryView.of(row) for row in session.scalars(query)]


def active_preferences(repository: Repository, namespace: str) -> list[MemoryView]:
    query = (
        select(Memory)
        .where(
            Memory.namespace == namespace,
            Memory.status == MemoryStatus.ACTIVE.value,
            Memory.type == MemoryType.PREFERENCE.value,
        )
        .order_by(Memory.id.desc())
        .limit(_MAX_PREFERENCES)
    )
    with repository.reading() as session:
        return [v for v in map(MemoryView.of, session.scalars(query)) if not v.is_trait]


def subject_edges(
    seeds: Sequence[MemoryView], preferences: Sequence[MemoryView], weight: float
) -> list[Edge]:
    """Pair each new preference with the preferences that share one of its tags."""
    edges: list[Edge] = []
    for seed in seeds:
        if seed.type != MemoryType.PREFERENCE or not seed.tags:
            continue
        for other in preferences:
            if other.id != seed.id and set(seed.tags) & set(other.tags):
                edges.append((min(seed.id, other.id), max(seed.id, other.id), weight))
    return edges


def candidate_edges(
    edges: Iterable[Edge], views: Mapping[int, MemoryView], *, near: float, subject: float
) -> list[Edge]:
    """Keep near duplicates, and pairs of preferences similar enough to share a subject."""
    kept: list[Edge] = []
    for a, b, sim in edges:
        if a not in views or b not in views:
            continue
        both_preferences = views[a].type == views[b].type == MemoryType.PREFERENCE
        if sim >= near or (both_preferences and sim >= subject):
            kept.append((a, b, sim))
    return kept


def pack(groups: Sequence[Group], per_call: int) -> list[list[Group]]:
    """Put whole groups into calls of about ``per_call`` memories each."""
    calls: list[list[Group]] = []
    count = 0
    for group in groups:
        if calls and count + len(group) <= per_call:
            calls[-1].append(group)
            count += len(group)
        else:
            calls.append([group])
            count = len(group)
    return calls


@dataclass
class Verdicts:
    """Turns validated verdicts into changes; each memory is retired at most once per run."""

    retired: set[int]
    changes: list[Change] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    conflicts: int = 0
    notes: list[dict[str, Any]] = field(default_factory=list)
    _targets: set[int] = field(default_factory=set)

    def add(self, batch: Sequence[Group], reply: AuditorReply) -> None:
        group_of = {m.id: n for n, group in enumerate(batch) for m in group}
        contents = {m.id: m.content for group in batch for m in group}
        for verdict in reply.verdicts:
            if verdict.action == "keep":
                continue
            other = verdict.superseded_by if verdict.action == "supersede" else verdict.merge_into
            unknown = [i for i in (verdict.id, other) if i is not None and i not in group_of]
            if unknown:
                self.dropped.extend(unknown)
                continue
            if other is not None and group_of[other] != group_of[verdict.id]:
                self.conflicts += 1  # the replacement must come from the same group
                continue
            if not self._free(verdict.id, other, verdict.action == "merge"):
                self.conflicts += 1
                continue
            self.changes.append(_change(verdict, contents.get(other) if other else None))
            self.notes.append(
                {
                    "id": verdict.id,
                    "action": verdict.action,
                    "category": verdict.category,
                    "into": other,
                    "reason": verdict.reason,
                }
            )

    def _free(self, memory_id: int, other: int | None, merge: bool) -> bool:
        """Claim the memory (and its replacement) unless an earlier verdict already did."""
        if memory_id in self.retired or memory_id in self._targets:
            return False
        if other is not None and (other in self.retired or (merge and other in self._targets)):
            return False
        self.retired.add(memory_id)
        if other is not None:
            self._targets.add(other)
        return True


def _change(verdict: Verdict, other_content: str | None) -> Change:
    ops: list[Operation]
    if verdict.action == "supersede" and verdict.superseded_by is not None:
        ops = [
            SetStatus(
                memory_id=verdict.id,
                status=MemoryStatus.SUPERSEDED,
                replaced_by=verdict.superseded_by,
            )
        ]
        label = f"supersede #{verdict.id} by #{verdict.superseded_by}"
    elif verdict.action == "merge" and verdict.merge_into is not None:
        into, content = verdict.merge_into, (verdict.merged_content or "").strip()
        ops = []
        if content and content != other_content:
            ops.append(UpdateMemory(memory_id=into, changes={"content": content}))
        ops += [
            InheritRelations(from_ids=(verdict.id,), to=into),
            SetStatus(memory_id=verdict.id, status=MemoryStatus.MERGED, replaced_by=into),
        ]
        label = f"merge #{verdict.id} into #{into}"
    else:
        ops = [SetStatus(memory_id=verdict.id, status=MemoryStatus.ARCHIVED)]
        label = f"archive #{verdict.id}"
    return Change(label=f"{label} ({verdict.category})", operations=tuple(ops))


class Auditor(Job):
    name = "auditor"
    uses_index = True

    def plan(self, ctx: JobContext) -> Plan:
        config = ctx.jobs
        exact_mark = ctx.watermark("exact_watermark")
        mark = ctx.watermark()
        judging = ctx.llm.available
        start = min(exact_mark, mark) if judging else exact_mark
        read = memories_after(ctx.repository, ctx.namespace, start, limit=config.max_items_per_run)
        seeds = [m for m in read if not m.is_trait]
        if not read:
            return self.empty_plan(ctx)
        exact_seeds = [s for s in seeds if s.id > exact_mark]
        twins = same_hash(ctx.repository, ctx.namespace, [s.content_hash for s in exact_seeds])
        changes = exact_duplicate_changes(exact_seeds, twins)
        retired = {
            op.memory_id for c in changes for op in c.operations if isinstance(op, SetStatus)
        }
        state: dict[str, Any] = {
            **ctx.state,
            "exact_watermark": advance(exact_mark, [m.id for m in read if m.id > exact_mark]),
        }
        stats: dict[str, Any] = {"exact_duplicates": len(changes)}
        if not judging:
            return Plan(
                job=self.name,
                namespace=ctx.namespace,
                changes=tuple(changes),
                job_state=state,
                stats=stats,
                skipped="LLM not configured",
            )
        judged = [s for s in seeds if s.id > mark and s.id not in retired]
        groups = self._groups(ctx, judged, retired)
        calls = pack(groups, config.batch_size)
        answered, stopped = ask_each(
            ctx.llm,
            calls,
            lambda batch: ctx.llm.ask(
                render(
                    "auditor",
                    today=ctx.now.date(),
                    groups=[[m.for_prompt() for m in group] for group in batch],
                ),
                AuditorReply,
            ),
        )
        verdicts = Verdicts(retired=set(retired))
        for batch, reply in answered:
            verdicts.add(batch, reply)
        judged_ids = {s.id for s in judged}
        left = [
            m.id for batch in calls[len(answered) :] for g in batch for m in g if m.id in judged_ids
        ]
        state["watermark"] = advance(mark, [m.id for m in read if m.id > mark], left)
        stats |= {
            "groups": len(groups),
            "judged": len(verdicts.changes),
            "conflicting_verdicts": verdicts.conflicts,
            "dropped_ids": dropped_note(self.name, verdicts.dropped),
            "verdicts": verdicts.notes,
        }
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=(*changes, *verdicts.changes),
            job_state=state,
            stats=stats,
            stopped=stopped,
        )

    def _groups(
        self, ctx: JobContext, judged: Sequence[MemoryView], retired: set[int]
    ) -> list[Group]:
        """Group the new memories with the memories they may duplicate or contradict."""
        if not judged:
            return []
        config = ctx.jobs
        similar = neighbours(
            ctx.store,
            ctx.namespace,
            judged,
            per_seed=config.auditor_max_group - 1,
            threshold=min(config.auditor_near_threshold, config.auditor_subject_threshold),
        )
        preferences = active_preferences(ctx.repository, ctx.namespace)
        ids = {i for e in similar for i in e[:2]} | {s.id for s in judged}
        views = {
            i: v
            for i, v in active_views(ctx.repository, ctx.namespace, ids).items()
            if not v.is_trait and i not in retired
        }
        views |= {p.id: p for p in preferences if p.id not in retired}
        edges = candidate_edges(
            similar,
            views,
            near=config.auditor_near_threshold,
            subject=config.auditor_subject_threshold,
        )
        edges += subject_edges(
            [s for s in judged if s.id in views],
            [p for p in preferences if p.id in views],
            config.auditor_subject_threshold,
        )
        judged_ids = {s.id for s in judged}
        return [
            tuple(views[i] for i in members)
            for members in capped_groups(edges, max_size=config.auditor_max_group)
            if judged_ids & set(members)
        ]
