"""soul_mapper: events and facts since the watermark -> the user's lasting traits.

A trait is a ``preference`` memory with metadata ``trait: true`` and ``confidence``, and a
``derived_from`` relation to each memory that supports it. A revised trait is a new memory that
supersedes the previous version (which keeps its history), never an in-place edit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prompts.render import RenderedPrompt, render
from prompts.soul_mapper_schema import ProposedTrait, SoulMapperReply
from secretary.jobs.base import Call, Change, Draft, MemoryJob, chunks, is_trait
from secretary.jobs.context import JobContext
from secretary.jobs.prompt_data import oldest_first, prompt_day
from store.kinds import MemoryStatus, MemoryType, RelationType
from store.operations import CreateMemory, CreateRelation, InheritRelations, Operation, SetStatus
from store.text import content_hash
from store.views import MemoryView

EVIDENCE_TYPES = (MemoryType.EVENT.value, MemoryType.FACT.value)
TRAIT_TAG = "trait"


def current_traits(ctx: JobContext) -> list[MemoryView]:
    """Return the active traits, most recently changed first."""
    preferences = ctx.db.memories.of_type(
        ctx.namespace, MemoryType.PREFERENCE.value, order="recently_changed"
    )
    return [p for p in preferences if is_trait(p)]


def trait_for_prompt(trait: MemoryView) -> dict[str, Any]:
    return {
        "id": trait.id,
        "trait": trait.content,
        "confidence": trait.metadata.get("confidence"),
        "since": prompt_day(trait.event_time),
    }


def importance_of(confidence: float) -> int:
    """A trait's importance: 5 for a hint, up to 9 for one the evidence makes certain."""
    return 5 + round(max(0.0, min(confidence, 1.0)) * 4)


@dataclass
class Traits:
    """Turns proposed traits into changes, citing only memories and traits that were sent."""

    traits: Mapping[int, MemoryView]
    # The text of every active trait (shown or not) and of those made this run, by content
    # hash: the trait's id, or the plan key of one made this run.
    known: dict[str, int | str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    conflicts: int = 0
    # Traits left out, each {"item": ..., "reason": ...}.
    rejected: list[dict[str, Any]] = field(default_factory=list)
    _revised: set[int] = field(default_factory=set)

    def add(self, batch: Sequence[MemoryView], reply: SoulMapperReply, number: int) -> None:
        evidence = {m.id: m for m in batch}
        for index, proposed in enumerate(reply.traits):
            cited = [i for i in dict.fromkeys(proposed.evidence_ids) if i in evidence]
            self.dropped.extend(i for i in proposed.evidence_ids if i not in evidence)
            previous = proposed.updates_trait_id
            item = f"trait {proposed.trait.strip()[:60]!r}"
            if previous is not None and previous not in self.traits:
                self.dropped.append(previous)
                self._reject(item, f"revises #{previous}, which is not a trait that was shown")
                continue
            if not cited:
                self._reject(item, "cites no memory that was sent")
                continue
            if previous is not None and previous in self._revised:
                self.conflicts += 1  # two revisions of one trait in a run: keep the first
                self._reject(item, f"a second revision of trait #{previous} in one run")
                continue
            same = self.known.get(content_hash(proposed.trait.strip()))
            if same is not None and same != previous:
                # A model that forgets to say which trait it revises proposes it again.
                said = f"trait #{same}" if isinstance(same, int) else "a trait made this run"
                self._reject(item, f"says what {said} says already")
                continue
            key = f"t{number}_{index}"
            self.known[content_hash(proposed.trait.strip())] = key
            change = _trait_change(key, proposed, [evidence[i] for i in cited], previous)
            if previous is not None:  # revised from what it said when it was read
                change = replace(change, read={previous: self.traits[previous].version})
            self.changes.append(change)
            if previous is not None:
                self._revised.add(previous)

    def _reject(self, item: str, reason: str) -> None:
        self.rejected.append({"item": item, "reason": reason})


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


@dataclass(kw_only=True)
class TraitWork:
    """The traits shown to the model, and the traits made from its replies so far."""

    shown: list[dict[str, Any]]
    traits: Traits


Batch = Sequence[MemoryView]


class SoulMapper(MemoryJob[TraitWork, Batch, SoulMapperReply]):
    name = "soul_mapper"
    summary = "events and facts -> long-term traits as preference memories with their evidence"
    default_cron = "0 5 * * 0"
    needs_llm = True
    prompt_id = "soul_mapper"
    reply_schema = SoulMapperReply
    memory_types = EVIDENCE_TYPES

    def prepare(self, ctx: JobContext, new: Sequence[MemoryView]) -> TraitWork:
        if not ctx.llm.available:
            return TraitWork(shown=[], traits=Traits(traits={}))
        every = current_traits(ctx)
        traits = every[: max(ctx.jobs.soul_mapper_max_traits, 0)]
        known: dict[str, int | str] = {t.content_hash: t.id for t in reversed(every)}
        return TraitWork(
            shown=[trait_for_prompt(t) for t in traits],
            traits=Traits(traits={t.id: t for t in traits}, known=known),
        )

    def calls(
        self, ctx: JobContext, work: TraitWork, fresh: Sequence[MemoryView], draft: Draft
    ) -> list[Call[Batch]]:
        return [
            Call(about=batch, ids=tuple(m.id for m in batch))
            for batch in chunks(fresh, ctx.jobs.batch_size)
        ]

    def shown(self, work: TraitWork, call: Call[Batch]) -> set[int]:
        return {m.id for m in call.about} | set(work.traits.traits)

    def prompt(self, ctx: JobContext, work: TraitWork, call: Call[Batch]) -> RenderedPrompt:
        # A lasting trait does not hang on the hour: the day of each memory is enough.
        memories = oldest_first(call.about, days=True)
        return render(self.prompt_id, today=ctx.now.date(), traits=work.shown, memories=memories)

    def collect(
        self,
        ctx: JobContext,
        work: TraitWork,
        call: Call[Batch],
        reply: SoulMapperReply,
        number: int,
        draft: Draft,
    ) -> None:
        work.traits.add(call.about, reply, number)

    def finish(
        self,
        ctx: JobContext,
        work: TraitWork,
        draft: Draft,
        answered: Sequence[tuple[Call[Batch], Any]],
    ) -> None:
        made = work.traits
        draft.changes.extend(made.changes)
        draft.dropped.extend(made.dropped)
        draft.rejected.extend(made.rejected)
        draft.stats.update(
            evidence=sum(len(call.about) for call, _ in answered),
            traits=len(made.changes),
            conflicting_traits=made.conflicts,
        )
