"""soul_mapper: events and facts since the watermark -> the user's lasting traits.

A trait is a ``preference`` memory with metadata ``trait: true`` and ``confidence``, and a
``derived_from`` relation to each memory that supports it. A revised trait is a new memory that
supersedes the previous version (which keeps its history), never an in-place edit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from prompts.render import render
from prompts.soul_mapper_schema import ProposedTrait, SoulMapperReply
from secretary.jobs.base import (
    Change,
    Job,
    JobContext,
    MemoryView,
    Plan,
    advance,
    ask_each,
    chunks,
    dropped_note,
    memories_after,
)
from store.models import Memory, MemoryStatus, MemoryType, RelationType
from store.operations import CreateMemory, CreateRelation, InheritRelations, Operation, SetStatus
from store.repository import Repository

EVIDENCE_TYPES = (MemoryType.EVENT.value, MemoryType.FACT.value)
TRAIT_TAG = "trait"


def current_traits(repository: Repository, namespace: str, limit: int) -> list[MemoryView]:
    """Return the active traits, most recently changed first."""
    if limit <= 0:
        return []
    query = (
        select(Memory)
        .where(
            Memory.namespace == namespace,
            Memory.status == MemoryStatus.ACTIVE.value,
            Memory.type == MemoryType.PREFERENCE.value,
        )
        .order_by(Memory.updated_at.desc(), Memory.id.desc())
    )
    found: list[MemoryView] = []
    with repository.reading() as session:
        for row in session.scalars(query):
            view = MemoryView.of(row)
            if view.is_trait:
                found.append(view)
                if len(found) >= limit:
                    break
    return found


def trait_for_prompt(trait: MemoryView) -> dict[str, Any]:
    return {
        "id": trait.id,
        "trait": trait.content,
        "confidence": trait.metadata.get("confidence"),
        "since": trait.event_time.isoformat(),
    }


def importance_of(confidence: float) -> int:
    """A trait's importance: 5 for a hint, up to 9 for one the evidence makes certain."""
    return 5 + round(max(0.0, min(confidence, 1.0)) * 4)


@dataclass
class Traits:
    """Turns proposed traits into changes, citing only memories and traits that were sent."""

    traits: Mapping[int, MemoryView]
    changes: list[Change] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    conflicts: int = 0
    _revised: set[int] = field(default_factory=set)

    def add(self, batch: Sequence[MemoryView], reply: SoulMapperReply, number: int) -> None:
        evidence = {m.id: m for m in batch}
        for index, proposed in enumerate(reply.traits):
            cited = [i for i in dict.fromkeys(proposed.evidence_ids) if i in evidence]
            self.dropped.extend(i for i in proposed.evidence_ids if i not in evidence)
            previous = proposed.updates_trait_id
            if previous is not None and previous not in self.traits:
                self.dropped.append(previous)
                continue
            if not cited:
                continue
            if previous is not None and previous in self._revised:
                self.conflicts += 1  # two revisions of one trait in a run: keep the first
                continue
            key = f"t{number}_{index}"
            self.changes.append(
                _trait_change(key, proposed, [evidence[i] for i in cited], previous)
            )
            if previous is not None:
                self._revised.add(previous)


def _trait_change(
    key: str, proposed: ProposedTrait, evidence: Sequence[MemoryView], previous: int | None
) -> Change:
    metadata: dict[str, Any] = {
        "trait": True,
        "confidence": proposed.confidence,
        "evidence_ids": [m.id for m in evidence],
    }
    if previous is not None:
        metadata["previous_trait_id"] = previous
    ops: list[Operation] = [
        CreateMemory(
            key=key,
            content=proposed.trait.strip(),
            type=MemoryType.PREFERENCE.value,
            # A trait is as recent as its latest evidence, not as the run that noticed it.
            event_time=max(m.event_time for m in evidence),
            importance=importance_of(proposed.confidence),
            tags=(TRAIT_TAG,),
            metadata=metadata,
            source="soul_mapper",
        ),
        *(
            CreateRelation(
                source=key,
                target=m.id,
                type=RelationType.DERIVED_FROM.value,
                strength=proposed.confidence,
            )
            for m in evidence
        ),
    ]
    if previous is not None:
        ops += [
            # The earlier version's evidence still supports the revised trait.
            InheritRelations(from_ids=(previous,), to=key),
            SetStatus(memory_id=previous, status=MemoryStatus.SUPERSEDED, replaced_by=key),
        ]
    label = f"revise trait #{previous}" if previous is not None else "new trait"
    return Change(label=f"{label}: {proposed.trait.strip()[:60]}", operations=tuple(ops))


class SoulMapper(Job):
    name = "soul_mapper"
    needs_llm = True

    def plan(self, ctx: JobContext) -> Plan:
        config = ctx.jobs
        watermark = ctx.watermark()
        evidence = memories_after(
            ctx.repository,
            ctx.namespace,
            watermark,
            limit=config.max_items_per_run,
            types=EVIDENCE_TYPES,
        )
        if not evidence:
            return self.empty_plan(ctx)
        if not ctx.llm.available:
            return self.empty_plan(
                ctx, skipped="LLM not configured", stats={"pending": len(evidence)}
            )
        traits = current_traits(ctx.repository, ctx.namespace, config.soul_mapper_max_traits)
        shown = [trait_for_prompt(t) for t in traits]
        batches = chunks(evidence, config.batch_size)
        answered, stopped = ask_each(
            ctx.llm,
            batches,
            lambda batch: ctx.llm.ask(
                render(
                    "soul_mapper",
                    today=ctx.now.date(),
                    traits=shown,
                    memories=[m.for_prompt() for m in batch],
                ),
                SoulMapperReply,
            ),
        )
        made = Traits(traits={t.id: t for t in traits})
        for number, (batch, reply) in enumerate(answered):
            made.add(batch, reply, number)
        left = [m.id for batch in batches[len(answered) :] for m in batch]
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=tuple(made.changes),
            job_state={
                **ctx.state,
                "watermark": advance(watermark, [m.id for m in evidence], left),
            },
            stats={
                "evidence": sum(len(b) for b, _ in answered),
                "traits": len(made.changes),
                "conflicting_traits": made.conflicts,
                "dropped_ids": dropped_note(self.name, made.dropped),
            },
            stopped=stopped,
        )
