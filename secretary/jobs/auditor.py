"""auditor: duplicates, contradictions, hallucinations and stale preferences among new memories.

Deterministic first: exact duplicates (same content hash; for events also the same session, or
within the window) are merged without asking the LLM, the whole backlog in one run, a read
and a record at a time; each carries its recalls to the memory it is merged into, and only a
pinned copy is kept apart (see ``exact_duplicate_changes``). The rest is grouped (near
duplicates by embedding similarity, preferences on the same subject) and only those groups are
judged by the LLM. Outcomes are supersede, merge or archive, never a delete. Traits belong to
the soul mapper and are left out.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from prompts.auditor_schema import AuditorReply, Verdict
from prompts.render import RenderedPrompt, render
from secretary.jobs.base import (
    LLM_NOT_CONFIGURED,
    Call,
    Change,
    Draft,
    MemoryJob,
    Plan,
    chunks,
    is_trait,
    pack,
)
from secretary.jobs.clustering import Pair, capped_groups
from secretary.jobs.context import JobContext
from secretary.jobs.neighbours import neighbours
from secretary.jobs.prompt_data import listed_once, oldest_first
from store.changes import plural
from store.kinds import MemoryStatus, MemoryType
from store.operations import CarryRecalls, InheritRelations, Operation, SetStatus, UpdateMemory
from store.views import MemoryView

# Types whose identical text at another time is another occurrence, not a duplicate.
_TIMED = frozenset({MemoryType.EVENT, MemoryType.INTERACTION_SUMMARY, MemoryType.TOOL_EXPERIENCE})
# Preferences read to find ones on the same subject as a new one.
_MAX_PREFERENCES = 1000

Group = tuple[MemoryView, ...]


def same_occurrence(a: MemoryView, b: MemoryView, window: timedelta) -> bool:
    """Tell whether two memories of identical text and type record the same thing.

    Facts and preferences with the same text always do. Events, summaries and tool
    experiences are occurrences: the same text is the same occurrence when both come from one
    session, when neither has a session and they are at most ``window`` apart (a client
    retrying, or the same line ingested twice), or when they happened at the same instant.
    """
    if a.content_hash != b.content_hash or a.type != b.type:
        return False
    if a.type not in _TIMED or a.event_time == b.event_time:
        return True
    if a.session_id is not None or b.session_id is not None:
        return a.session_id == b.session_id
    return abs(a.event_time - b.event_time) <= window


def duplicate_groups(pool: Sequence[MemoryView], window: timedelta) -> list[tuple[int, ...]]:
    """Group the memories that record the same thing (``same_occurrence``, chained), by id."""
    by_text: dict[Hashable, list[MemoryView]] = {}
    for memory in pool:
        by_text.setdefault((memory.content_hash, memory.type), []).append(memory)
    pairs: list[Pair] = []
    for same_text in by_text.values():
        ordered = sorted(same_text, key=lambda m: m.id)
        for index, first in enumerate(ordered):
            for second in ordered[index + 1 :]:
                if same_occurrence(first, second, window):
                    pairs.append((first.id, second.id, 1.0))
    return capped_groups(pairs, max_size=len(pool) or 1)


def keeper_of(group: Sequence[MemoryView]) -> MemoryView:
    """The duplicate that stays: pinned first, then the most important, then the oldest."""
    return min(group, key=lambda m: (not m.pinned, -m.importance, m.id))


@dataclass(frozen=True, kw_only=True)
class ExactDuplicates:
    """The merges of exact duplicates, and the copies left because they are pinned."""

    changes: tuple[Change, ...]
    pinned: tuple[int, ...] = ()


def exact_duplicate_changes(
    seeds: Sequence[MemoryView], candidates: Iterable[MemoryView], *, window: timedelta
) -> ExactDuplicates:
    """Merge every exact duplicate of a seed into its keeper (one change per duplicate).

    Protection does not keep an exact duplicate alive: the keeper holds the same text, and the
    copy's recalls are carried to it (``CarryRecalls``), so what a person relied on stays found.
    The one rule kept: a pinned memory is never merged away. The keeper is pinned if any copy
    is; a second pinned copy stays as it is (``pinned``).
    """
    pool = {m.id: m for m in [*candidates, *seeds] if not is_trait(m)}
    seed_ids = {s.id for s in seeds}
    changes: list[Change] = []
    pinned: list[int] = []
    for ids in duplicate_groups(list(pool.values()), window):
        if not seed_ids & set(ids):
            continue
        keeper = keeper_of([pool[i] for i in ids])
        for dup in (pool[i] for i in ids if i != keeper.id):
            if dup.pinned:
                pinned.append(dup.id)
                continue
            recalls: tuple[Operation, ...] = ()
            if dup.access_count or dup.last_accessed is not None:
                recalls = (CarryRecalls(from_id=dup.id, to=keeper.id),)
            changes.append(
                Change(
                    label=f"merge exact duplicate #{dup.id} into #{keeper.id}",
                    operations=(
                        InheritRelations(from_ids=(dup.id,), to=keeper.id),
                        *recalls,
                        SetStatus(
                            memory_id=dup.id, status=MemoryStatus.MERGED, replaced_by=keeper.id
                        ),
                    ),
                    lossless=True,
                )
            )
    return ExactDuplicates(changes=tuple(changes), pinned=tuple(pinned))


def subject_edges(
    seeds: Sequence[MemoryView], preferences: Sequence[MemoryView], weight: float
) -> list[Pair]:
    """Pair each new preference with the preferences that share one of its tags."""
    edges: list[Pair] = []
    for seed in seeds:
        if seed.type != MemoryType.PREFERENCE or not seed.tags:
            continue
        for other in preferences:
            if other.id != seed.id and set(seed.tags) & set(other.tags):
                edges.append((min(seed.id, other.id), max(seed.id, other.id), weight))
    return edges


def candidate_edges(
    edges: Iterable[Pair], views: Mapping[int, MemoryView], *, near: float, subject: float
) -> list[Pair]:
    """Keep near duplicates, and pairs of preferences similar enough to share a subject."""
    kept: list[Pair] = []
    for a, b, sim in edges:
        if a not in views or b not in views:
            continue
        both_preferences = views[a].type == views[b].type == MemoryType.PREFERENCE
        if sim >= near or (both_preferences and sim >= subject):
            kept.append((a, b, sim))
    return kept


@dataclass
class Verdicts:
    """Turns validated verdicts into changes; each memory is retired at most once per run."""

    retired: set[int]
    changes: list[Change] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    conflicts: int = 0
    notes: list[dict[str, Any]] = field(default_factory=list)
    # Verdicts left out, each {"item": ..., "reason": ...}.
    rejected: list[dict[str, Any]] = field(default_factory=list)
    _targets: set[int] = field(default_factory=set)

    def add(self, batch: Sequence[Group], reply: AuditorReply) -> None:
        group_of = {m.id: n for n, group in enumerate(batch) for m in group}
        views = {m.id: m for group in batch for m in group}
        torn = _torn(reply.verdicts)
        self.conflicts += len(torn)
        seen: set[tuple[int, str, int | None]] = set()
        for verdict in reply.verdicts:
            other = verdict.superseded_by if verdict.action == "supersede" else verdict.merge_into
            if verdict.action == "keep" or (verdict.id, verdict.action, other) in seen:
                continue  # a verdict said twice is said once
            seen.add((verdict.id, verdict.action, other))
            item = f"{verdict.action} #{verdict.id}" + (f" into #{other}" if other else "")
            if verdict.id in torn:
                self._reject(item, f"the reply gives #{verdict.id} conflicting verdicts")
                continue
            unknown = [i for i in (verdict.id, other) if i is not None and i not in group_of]
            if unknown:
                self.dropped.extend(unknown)
                self._reject(item, f"names {_ids(unknown)}, which were not sent")
                continue
            if other is not None and group_of[other] != group_of[verdict.id]:
                self.conflicts += 1
                self._reject(item, "the replacing memory belongs to another group")
                continue
            if (
                verdict.action == "supersede"
                and other is not None
                and _older(views, other, verdict.id)
            ):
                self._reject(item, f"the replacing memory #{other} is older than #{verdict.id}")
                continue
            if not self._free(verdict.id, other, verdict.action == "merge"):
                self.conflicts += 1
                self._reject(item, "an earlier verdict of this run already retired or kept one")
                continue
            change = _change(verdict, views[other].content if other else None)
            read = {i: views[i].version for i in (verdict.id, other) if i is not None}
            self.changes.append(replace(change, read=read))
            self.notes.append(
                {
                    "id": verdict.id,
                    "action": verdict.action,
                    "category": verdict.category,
                    "into": other,
                    "reason": verdict.reason,
                }
            )

    def _reject(self, item: str, reason: str) -> None:
        self.rejected.append({"item": item, "reason": reason})

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


def _torn(verdicts: Iterable[Verdict]) -> set[int]:
    """The memories a reply gives more than one verdict (keep it and archive it, say): the
    model could not decide, so none of them stands."""
    said: dict[int, set[tuple[str, int | None]]] = {}
    for v in verdicts:
        said.setdefault(v.id, set()).add((v.action, v.superseded_by or v.merge_into))
    return {memory_id for memory_id, verdicts in said.items() if len(verdicts) > 1}


def _older(views: Mapping[int, MemoryView], replacing: int, replaced: int) -> bool:
    """Whether the memory a verdict would put in another's place happened before it: the
    prompt asks for the newer one, so the reply has them the wrong way round."""
    return views[replacing].event_time < views[replaced].event_time


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


def _change(verdict: Verdict, other_content: str | None) -> Change:
    ops: list[Operation]
    if verdict.action == "supersede" and verdict.superseded_by is not None:
        # The replacement says the same thing, up to date: what the old memory was related to,
        # and what was said next to it, is related to it now, so a search that spreads from
        # there finds it.
        ops = [
            InheritRelations(from_ids=(verdict.id,), to=verdict.superseded_by, context=True),
            SetStatus(
                memory_id=verdict.id,
                status=MemoryStatus.SUPERSEDED,
                replaced_by=verdict.superseded_by,
            ),
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


@dataclass(kw_only=True)
class Audit:
    """What one auditor run has decided so far: the retired memories and the verdicts."""

    retired: set[int] = field(default_factory=set)
    verdicts: Verdicts = field(default_factory=lambda: Verdicts(retired=set()))
    groups: int = 0
    # Pinned exact duplicates left as they are (a pinned memory is never merged away).
    pinned: set[int] = field(default_factory=set)


Batch = Sequence[Group]


class Auditor(MemoryJob[Audit, Batch, AuditorReply]):
    name = "auditor"
    summary = (
        "exact duplicates merged by hash; contradictions, hallucinations, stale preferences judged"
    )
    default_cron = "40 4 * * *"
    uses_index = True
    deterministic_watermark = "exact_watermark"
    settles_backlog = True
    llm_watermark = "watermark"
    prompt_id = "auditor"
    reply_schema = AuditorReply

    def prepare(self, ctx: JobContext, new: Sequence[MemoryView]) -> Audit:
        return Audit()

    def settle(
        self, ctx: JobContext, work: Audit, fresh: Sequence[MemoryView], draft: Draft
    ) -> None:
        # Called once per read of the backlog: what an earlier read merged is gone already
        # (or, in a dry run, would be).
        seeds = [m for m in fresh if not is_trait(m) and m.id not in work.retired]
        hashes = [s.content_hash for s in seeds]
        twins = ctx.db.memories.with_hashes(ctx.namespace, hashes) if hashes else []
        window = timedelta(minutes=ctx.jobs.auditor_duplicate_window_minutes)
        found = exact_duplicate_changes(
            seeds, [t for t in twins if t.id not in work.retired], window=window
        )
        work.retired |= {
            op.memory_id for c in found.changes for op in c.operations if isinstance(op, SetStatus)
        }
        work.verdicts = Verdicts(retired=set(work.retired))
        draft.changes.extend(found.changes)
        draft.stats["exact_duplicates"] = len(found.changes)
        pinned = set(found.pinned) - work.pinned
        work.pinned |= pinned
        if pinned:
            draft.stats["exact_duplicates_pinned"] = sorted(pinned)
            draft.left = f"{plural(len(pinned), 'exact duplicate')} left as they are: pinned"

    def split(self, ctx: JobContext, plan: Plan) -> list[Plan]:
        """Merges in records of at most max_changes_per_run each, so that every transaction
        stays as bounded as the cap keeps the other changes (which it counts; these it does
        not, see ``secretary.jobs.guardrails``)."""
        size = ctx.guardrails.max_changes_per_run
        if not size or len(plan.changes) <= size:
            return [plan]
        parts = chunks(plan.changes, size)
        head = [
            replace(
                plan,
                changes=tuple(part),
                job_state=None,
                stats={**plan.stats, "exact_duplicates": len(part)},
                skipped=None,
                left=None,
            )
            for part in parts[:-1]
        ]
        last = {**plan.stats, "exact_duplicates": len(parts[-1])}
        return [*head, replace(plan, changes=tuple(parts[-1]), stats=last)]

    def skip(self, ctx: JobContext, work: Audit, new: Sequence[MemoryView], draft: Draft) -> None:
        draft.skipped = LLM_NOT_CONFIGURED

    def calls(
        self, ctx: JobContext, work: Audit, fresh: Sequence[MemoryView], draft: Draft
    ) -> list[Call[Batch]]:
        judged = [s for s in fresh if not is_trait(s) and s.id not in work.retired]
        groups = self._groups(ctx, judged, work.retired)
        work.groups = len(groups)
        judged_ids = {s.id for s in judged}

        def new_in(group: Group) -> list[int]:
            return [m.id for m in group if m.id in judged_ids]

        return [
            Call(about=batch, ids=tuple(i for g in batch for i in new_in(g)))
            for batch in pack(groups, ctx.jobs.batch_size, new_in)
        ]

    def shown(self, work: Audit, call: Call[Batch]) -> set[int]:
        return {m.id for group in call.about for m in group}

    def prompt(self, ctx: JobContext, work: Audit, call: Call[Batch]) -> RenderedPrompt:
        memories = oldest_first(listed_once(call.about))
        groups = [[m.id for m in group] for group in call.about]
        return render(self.prompt_id, today=ctx.now.date(), memories=memories, groups=groups)

    def collect(
        self,
        ctx: JobContext,
        work: Audit,
        call: Call[Batch],
        reply: AuditorReply,
        number: int,
        draft: Draft,
    ) -> None:
        work.verdicts.add(call.about, reply)

    def finish(
        self,
        ctx: JobContext,
        work: Audit,
        draft: Draft,
        answered: Sequence[tuple[Call[Batch], Any]],
    ) -> None:
        verdicts = work.verdicts
        draft.changes.extend(verdicts.changes)
        draft.dropped.extend(verdicts.dropped)
        draft.rejected.extend(verdicts.rejected)
        draft.stats.update(
            groups=work.groups,
            judged=len(verdicts.changes),
            conflicting_verdicts=verdicts.conflicts,
            verdicts=verdicts.notes,
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
        preferences = [
            p
            for p in ctx.db.memories.of_type(
                ctx.namespace, MemoryType.PREFERENCE.value, order="newest", limit=_MAX_PREFERENCES
            )
            if not is_trait(p)
        ]
        ids = {i for e in similar for i in e[:2]} | {s.id for s in judged}
        views = {
            i: v
            for i, v in ctx.db.memories.active(ctx.namespace, ids).items()
            if not is_trait(v) and i not in retired
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
