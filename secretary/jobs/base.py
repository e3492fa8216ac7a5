"""What every maintenance job shares: plans, the job interface, and the plan skeleton.

A job's ``plan()`` reads (and may ask the LLM) and returns a ``Plan``: changes, each a tuple of
operations that stand or fall together, plus the job state (watermarks) to save with them.
A job never writes: the runner (``secretary.runner``) hands the plan it kept to
``Writer.apply``, which writes exactly that, its record and the job state in one transaction.

Most jobs plan the same way, written once in ``WatermarkJob.plan``: read what is new past the
job's watermarks; plan the part that needs no model (exact duplicates, associative edges);
then, if a model is configured, group the rest into calls, ask about each, turn the replies
into changes (ids the reply names that were not sent are dropped and counted; a reply naming
none that were is sent back for repair) and move the LLM part's watermark over every call that
was answered. A job supplies only its own steps.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import Any, ClassVar, Generic, TypeVar

from loguru import logger

from prompts import ReplyModel
from prompts.render import RenderedPrompt
from secretary.jobs.context import JobContext, RunLimitReached
from secretary.llm.errors import BudgetExhausted, LlmError
from store.errors import SecretaryError
from store.operations import Operation
from store.views import MemoryView

T = TypeVar("T")  # an item read past the watermark
G = TypeVar("G")  # what one LLM call asks about
W = TypeVar("W")  # what a run prepares once and every step reads
R = TypeVar("R", bound=ReplyModel)

LLM_NOT_CONFIGURED = "LLM not configured"


@dataclass(frozen=True, kw_only=True)
class Change:
    """Operations that stand or fall together: a merge, a summary with its links, a trait."""

    label: str
    operations: tuple[Operation, ...]
    # Merges an exact duplicate into a memory with the same text: nothing is lost, so only a
    # pinned memory holds it back and the change cap does not count it (see guardrails).
    lossless: bool = False
    # The versions of the memories it was decided on, as read: a change another writer made
    # to one of them meanwhile drops it (see ``secretary.outcomes.without_overtaken``).
    read: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one run of a job would do; writes nothing until applied."""

    job: str
    namespace: str
    changes: tuple[Change, ...] = ()
    # Saved with the changes; None leaves the job's state as it was.
    job_state: Mapping[str, Any] | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    # Why the LLM part did not run (e.g. no model configured), if it did not.
    skipped: str | None = None
    # Why the run stopped before the end of its work (budget, call cap), if it did.
    stopped: str | None = None
    # What this part leaves undone on purpose, and why ("2 exact duplicates: pinned").
    left: str | None = None
    # Which part of a two-part job this is ("deterministic" or "model"); None: the whole run.
    part: str | None = None
    # Items of the replies that were left out, each {"item": ..., "reason": ...}.
    rejected: tuple[Mapping[str, Any], ...] = ()
    # The items the answered calls were about (a retry of quarantined items clears them).
    answered: tuple[int, ...] = ()

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(op for change in self.changes for op in change.operations)

    def keeping(self, indexes: Iterable[int]) -> Plan:
        """The same plan with only the changes at ``indexes``."""
        return dataclasses.replace(self, changes=tuple(self.changes[i] for i in indexes))


class Job(ABC):
    """A maintenance job: ``plan()`` reads and may ask the LLM; ``apply()`` writes the plan."""

    name: ClassVar[str]
    # One line for `--help` and the docs.
    summary: ClassVar[str]
    # When the daemon runs it unless the config or `secretary schedule set` says otherwise.
    default_cron: ClassVar[str]
    # Has nothing to do without the LLM, so it is skipped at once when no model is configured.
    needs_llm: ClassVar[bool] = False
    # Reads neighbours through the vector index, so the outbox is synced before it runs.
    uses_index: ClassVar[bool] = False

    @abstractmethod
    def parts(self, ctx: JobContext) -> Iterator[Plan]:
        """Yield the run's plans in the order they are applied, each with its own record.

        The runner applies one before it asks for the next, and stops asking when one could
        not be applied (refused, or waiting for approval).
        """

    def empty_plan(self, ctx: JobContext, **values: Any) -> Plan:
        return Plan(job=self.name, namespace=ctx.namespace, **values)


# -- the skeleton ------------------------------------------------------------------------------


class BatchFailed(SecretaryError):
    """An LLM call failed for good (after its retries and its repair); the run stops there.

    ``ids`` are the items the call was about: a batch that keeps failing is quarantined.
    """

    def __init__(self, job: str, ids: Sequence[int], cause: LlmError) -> None:
        self.ids = tuple(ids)
        self.cause = cause
        self.retry_after = getattr(cause, "retry_after", None)
        super().__init__(f"{job}: a call about {len(self.ids)} item(s) failed: {cause}")


@dataclass(frozen=True, kw_only=True)
class Call(Generic[G]):
    """One LLM call: what it asks about, and the new items it settles once it is answered."""

    about: G
    ids: tuple[int, ...]


@dataclass(kw_only=True)
class Draft:
    """A plan being drafted by the skeleton and the job's steps."""

    state: Mapping[str, Any]  # the job state this part starts from
    part: str | None = None
    changes: list[Change] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    # Ids a reply named that were not sent to it.
    dropped: list[int] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    moved: dict[str, int] = field(default_factory=dict)
    answered: list[int] = field(default_factory=list)
    skipped: str | None = None
    stopped: str | None = None
    left: str | None = None

    def advance(self, key: str, value: int) -> None:
        self.moved[key] = value

    def reject(self, item: str, reason: str) -> None:
        """Leave an item of a reply out, saying why (it goes into the record)."""
        self.rejected.append({"item": item, "reason": reason})

    def plan(self, job: str, namespace: str) -> Plan:
        stats = {**self.stats, "part": self.part} if self.part else self.stats
        return Plan(
            job=job,
            namespace=namespace,
            changes=tuple(self.changes),
            job_state={**self.state, **self.moved} if self.moved else None,
            stats=stats,
            skipped=self.skipped,
            stopped=self.stopped,
            left=self.left,
            part=self.part,
            rejected=tuple(self.rejected),
            answered=tuple(self.answered),
        )


class WatermarkJob(Job, Generic[T, W, G, R]):
    """The plan skeleton (see the module docstring); subclasses supply the steps."""

    # The part that needs no model, and its watermark (None: the job has no such part).
    deterministic_watermark: ClassVar[str | None] = None
    # The part that needs no model works through everything past its own watermark in one
    # run, a read (and a record) at a time, not only what the model's part reads.
    settles_backlog: ClassVar[bool] = False
    # The LLM part's watermark, its prompt and the schema its replies must match.
    llm_watermark: ClassVar[str] = "watermark"
    prompt_id: ClassVar[str]
    reply_schema: ClassVar[type[ReplyModel]]

    def parts(self, ctx: JobContext) -> Iterator[Plan]:
        if ctx.retry_quarantined:
            yield from self._retry(ctx)
            return
        wants = self.wants_llm(ctx)
        asking = wants and ctx.llm.available
        keys = [self.deterministic_watermark, self.llm_watermark if asking else None]
        marks = {key: ctx.watermark(key) for key in keys if key is not None}
        new = self.read(ctx, min(marks.values(), default=ctx.watermark(self.llm_watermark)))
        if not new:
            # Without a model only the part that needs none reads; if what is past the model's
            # watermark still waits for it, the run was skipped, not "nothing to do".
            waits = wants and not asking and bool(self.read(ctx, ctx.watermark(self.llm_watermark)))
            yield self.empty_plan(ctx, skipped=LLM_NOT_CONFIGURED if waits else None)
            return
        work = self.prepare(ctx, new)
        state: Mapping[str, Any] = ctx.state
        two_parts = self.deterministic_watermark is not None and asking
        if self.deterministic_watermark is not None:
            key, part = self.deterministic_watermark, "deterministic" if two_parts else None
            mark = marks[key]
            fresh = [item for item in new if self.id_of(item) > mark]
            first = True
            while True:
                draft = Draft(state=state, part=part)
                self.settle(ctx, work, fresh, draft)
                mark = advance(mark, map(self.id_of, fresh))
                draft.advance(key, mark)
                if wants and not asking and first:
                    self.skip(ctx, work, new, draft)
                plans = self.split(ctx, draft.plan(self.name, ctx.namespace))
                yield from plans  # each applied before the next read sees the store
                state, first = plans[-1].job_state or state, False
                if not (self.settles_backlog and fresh):
                    break
                fresh = list(self.read(ctx, mark))
                if not fresh:
                    break
            if not asking:
                return
        draft = Draft(state=state, part="model" if two_parts else None)
        if asking:
            mark = marks[self.llm_watermark]
            quarantined = set(ctx.quarantined)
            fresh = [x for x in new if self.id_of(x) > mark and self.id_of(x) not in quarantined]
            left = self._ask(ctx, work, fresh, draft) + self.unfinished(ctx, work)
            seen = [self.id_of(item) for item in new if self.id_of(item) > mark]
            draft.advance(self.llm_watermark, advance(mark, seen, left))
        elif wants:
            self.skip(ctx, work, new, draft)
        yield draft.plan(self.name, ctx.namespace)

    def _retry(self, ctx: JobContext) -> Iterator[Plan]:
        """Send the quarantined items again; the watermarks stay where they are."""
        draft = Draft(state=ctx.state)
        items = self.read_ids(ctx, ctx.quarantined) if ctx.quarantined else []
        if not ctx.llm.available or not items:
            if items:
                draft.skipped = LLM_NOT_CONFIGURED
            yield draft.plan(self.name, ctx.namespace)
            return
        work = self.prepare(ctx, items)
        self._ask(ctx, work, items, draft)
        draft.stats["retried"] = len(items)
        yield draft.plan(self.name, ctx.namespace)

    def _ask(self, ctx: JobContext, work: W, fresh: Sequence[T], draft: Draft) -> list[int]:
        """Ask about the items in calls until done, or until the budget or the call cap stops
        the run; return the items of the calls not made (they wait for the next run)."""
        calls = list(self.calls(ctx, work, fresh, draft))
        answered: list[tuple[Call[G], Any]] = []
        for call in calls:
            try:
                prompt = self.prompt(ctx, work, call)
                reply = ctx.llm.ask(prompt, self.reply_schema, partial(self.unusable, work, call))
            except BudgetExhausted as exc:
                logger.warning("{}: stopping after {} call(s): {}", self.name, len(answered), exc)
                draft.stopped = f"budget exhausted: {exc}"
                break
            except RunLimitReached as exc:
                logger.info("{}: stopping after {} call(s): {}", self.name, len(answered), exc)
                draft.stopped = str(exc)
                break
            except LlmError as exc:
                raise BatchFailed(self.name, call.ids, exc) from exc
            answered.append((call, reply))
        for number, (call, reply) in enumerate(answered):
            self.collect(ctx, work, call, reply, number, draft)
        self.finish(ctx, work, draft, answered)
        draft.answered = [i for call, _ in answered for i in call.ids]
        draft.stats["dropped_ids"] = dropped_note(self.name, draft.dropped)
        return [i for call in calls[len(answered) :] for i in call.ids]

    # -- the steps --------------------------------------------------------------------------------

    @abstractmethod
    def read(self, ctx: JobContext, after: int) -> Sequence[T]:
        """Return the items with id above ``after`` to plan for, by id."""

    @abstractmethod
    def read_ids(self, ctx: JobContext, ids: Sequence[int]) -> Sequence[T]:
        """Return the items with these ids that can still be planned for (quarantine retries)."""

    @abstractmethod
    def id_of(self, item: T) -> int: ...

    @abstractmethod
    def prepare(self, ctx: JobContext, new: Sequence[T]) -> W:
        """Compute once what the other steps share (neighbours, clusters, present rows)."""

    def wants_llm(self, ctx: JobContext) -> bool:
        """Whether the LLM part is configured to run at all (it still needs a model)."""
        return True

    def settle(self, ctx: JobContext, work: W, fresh: Sequence[T], draft: Draft) -> None:
        """Plan the deterministic part for the items past its watermark."""

    def split(self, ctx: JobContext, plan: Plan) -> list[Plan]:
        """The deterministic part's plan as the records to apply it in, in order (the last
        one saves the job state); by default one."""
        return [plan]

    def skip(self, ctx: JobContext, work: W, new: Sequence[T], draft: Draft) -> None:
        """Note that the LLM part could not run; by default, how much waits for it."""
        draft.skipped = LLM_NOT_CONFIGURED
        draft.stats["pending"] = len(new)

    @abstractmethod
    def calls(
        self, ctx: JobContext, work: W, fresh: Sequence[T], draft: Draft
    ) -> Sequence[Call[G]]:
        """Group the items to ask about into calls, in order."""

    @abstractmethod
    def prompt(self, ctx: JobContext, work: W, call: Call[G]) -> RenderedPrompt: ...

    def shown(self, work: W, call: Call[G]) -> set[int]:
        """The ids the call's prompt shows (a reply may name them): the new items, and any
        context a job's prompt shows too (neighbours, current traits)."""
        return set(call.ids)

    def unusable(self, work: W, call: Call[G], reply: R) -> str | None:
        """Why a valid reply cannot be used at all, by a rule its schema cannot express (it is
        sent back once for repair, saying so); None if it can. One naming only ids that were
        not shown (a model numbering the memories 1, 2, 3) would have every item dropped and
        its items passed by as judged; one naming some loses the others in ``collect``."""
        named = reply.referenced_ids()
        shown = self.shown(work, call)
        if not named or named & shown:
            return None
        return (
            f"it names only ids that were not sent ({listed(sorted(named))}): every id must be "
            f"one of those given, {listed(sorted(shown))}"
        )

    @abstractmethod
    def collect(
        self, ctx: JobContext, work: W, call: Call[G], reply: Any, number: int, draft: Draft
    ) -> None:
        """Turn one validated reply into changes; reject what it may not do, saying why."""

    def finish(
        self, ctx: JobContext, work: W, draft: Draft, answered: Sequence[tuple[Call[G], Any]]
    ) -> None:
        """Complete the draft once every reply is in (filters across replies, stats)."""

    def unfinished(self, ctx: JobContext, work: W) -> list[int]:
        """Items past the watermark that must wait for a later run although not asked about."""
        return []


# -- helpers shared by the jobs -------------------------------------------------------------------


class MemoryJob(WatermarkJob[MemoryView, W, G, R]):
    """A job over the namespace's active memories, of ``memory_types`` only if set."""

    memory_types: ClassVar[tuple[str, ...] | None] = None

    def read(self, ctx: JobContext, after: int) -> Sequence[MemoryView]:
        return ctx.db.memories.after(
            ctx.namespace, after, limit=ctx.jobs.max_items_per_run, types=self.memory_types
        )

    def read_ids(self, ctx: JobContext, ids: Sequence[int]) -> Sequence[MemoryView]:
        found = ctx.db.memories.active(ctx.namespace, ids).values()
        wanted = self.memory_types
        return sorted((m for m in found if wanted is None or m.type in wanted), key=lambda m: m.id)

    def id_of(self, item: MemoryView) -> int:
        return item.id


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """Split ``items``, in order, into as few calls as ``size`` allows, their lengths differing
    by one at most (50 items of at most 45 a call: 25 and 25, not 45 and 5)."""
    if not items:
        return []
    count = -(-len(items) // size)  # ceiling division
    each, more = divmod(len(items), count)  # the first ``more`` calls take one item more
    bounds = [n * each + min(n, more) for n in range(count + 1)]
    return [items[start:end] for start, end in pairwise(bounds)]


def pack(groups: Sequence[G], per_call: int, new: Callable[[G], Iterable[int]]) -> list[list[G]]:
    """Put whole groups into calls, in order, each call about at most ``per_call`` new items
    (``new`` gives a group's); a group with more has a call of its own. The older memories a
    group brings along are not counted: each is sent once per call, however many groups hold it.
    """
    calls: list[list[G]] = []
    count = 0
    for group in groups:
        size = len(set(new(group)))
        if calls and count + size <= per_call:
            calls[-1].append(group)
            count += size
        else:
            calls.append([group])
            count = size
    return calls


def advance(old: int, seen: Iterable[int], unfinished: Iterable[int] = ()) -> int:
    """Return the new watermark: every id at or below it has been dealt with.

    ``seen`` are the ids read this run; ``unfinished`` those of them left for a later run.
    """
    left = list(unfinished)
    if left:
        return max(old, min(left) - 1)
    return max([old, *seen])


def dropped_note(job: str, dropped: Iterable[int]) -> list[int]:
    """Log ids an LLM reply named that were not sent; return them sorted (for the stats)."""
    ids = sorted(set(dropped))
    if ids:
        logger.warning("{}: dropping ids the LLM named that were not in the batch: {}", job, ids)
    return ids


def listed(ids: Sequence[int], shown: int = 12) -> str:
    """Ids for a repair message: all of a few, else the first ones and how many more."""
    if len(ids) <= shown:
        return ", ".join(map(str, ids)) or "none"
    return ", ".join(map(str, ids[:shown])) + f" and {len(ids) - shown} more"


def split_ids(referenced: Iterable[int], allowed: Iterable[int]) -> tuple[set[int], set[int]]:
    """Given ids from an LLM reply and the ids that were sent, return (known, unknown)."""
    wanted = set(referenced)
    known = wanted & set(allowed)
    return known, wanted - known


def tidy_tags(tags: Iterable[str], limit: int = 5) -> tuple[str, ...]:
    """Lower-case, trimmed, unique tags, in the order given, at most ``limit``."""
    out: list[str] = []
    for tag in tags:
        clean = tag.strip().lower()
        if clean and clean not in out:
            out.append(clean)
    return tuple(out[:limit])


def is_trait(memory: MemoryView) -> bool:
    """A trait is the soul mapper's: a preference whose metadata says ``trait: true``."""
    return memory.metadata.get("trait") is True
