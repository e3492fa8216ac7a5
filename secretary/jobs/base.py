"""What every maintenance job shares: plans, the run's context, its LLM calls and common reads.

A job's ``plan()`` reads (and may ask the LLM) and returns a ``Plan``: changes, each a tuple of
operations that stand or fall together, plus the job state (watermark) to save with them.
``apply()`` writes exactly that through ``store.apply.apply_operations``, in one transaction.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from loguru import logger
from pydantic import BaseModel
from sqlalchemy import select

from prompts.render import RenderedPrompt, prompt_record
from secretary.budget import Budget
from secretary.clock import parse_timestamp
from secretary.config import JobsSettings, Settings
from secretary.errors import BudgetExhausted, LlmError, LlmInvalidReply, SecretaryError
from secretary.jobs.clustering import Edge, similar_pairs
from store.apply import Applied, RecordInfo, apply_operations
from store.models import Memory, MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.repository import Repository

if TYPE_CHECKING:
    from secretary.llm import LlmClient, LlmUsage
    from store.service import Store

T = TypeVar("T", bound=BaseModel)
B = TypeVar("B")
R = TypeVar("R")


class JobError(SecretaryError):
    """Base class of the jobs' errors."""


class UnknownJob(JobError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(f"unknown job {name!r}; known jobs: {', '.join(known)}")


class PlanNotFound(JobError):
    def __init__(self, record_id: int) -> None:
        super().__init__(f"no pending plan with record id {record_id}")


class RunLimitReached(Exception):
    """The run made its allowed number of LLM calls; the rest waits for the next run."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"max_llm_calls_per_run ({limit}) reached")


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryView:
    """A memory as the jobs see it: a frozen copy of the row's values."""

    id: int
    content: str
    content_hash: str
    type: str
    tags: tuple[str, ...]
    importance: int
    event_time: datetime
    created_at: datetime
    updated_at: datetime
    session_id: str | None
    pinned: bool
    last_accessed: datetime | None
    metadata: Mapping[str, Any]
    version: int
    status: str

    @classmethod
    def of(cls, row: Memory) -> MemoryView:
        return cls(
            id=row.id,
            content=row.content,
            content_hash=row.content_hash,
            type=row.type,
            tags=tuple(row.tags or ()),
            importance=row.importance,
            event_time=row.event_time,
            created_at=row.created_at,
            updated_at=row.updated_at,
            session_id=row.session_id,
            pinned=row.pinned,
            last_accessed=row.last_accessed,
            metadata=dict(row.metadata_ or {}),
            version=row.version,
            status=row.status,
        )

    @property
    def is_trait(self) -> bool:
        return self.metadata.get("trait") is True

    def for_prompt(self) -> dict[str, Any]:
        """The memory as data for a prompt (only ever placed inside a data block)."""
        return {
            "id": self.id,
            "type": self.type,
            "time": self.event_time.isoformat(),
            "recorded": self.created_at.isoformat(),
            "importance": self.importance,
            "content": self.content,
        }


@dataclass(frozen=True, kw_only=True)
class Change:
    """Operations that stand or fall together: a merge, a summary with its links, a trait."""

    label: str
    operations: tuple[Operation, ...]


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

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(op for change in self.changes for op in change.operations)

    def keeping(self, indexes: Iterable[int]) -> Plan:
        """The same plan with only the changes at ``indexes``."""
        return dataclasses.replace(self, changes=tuple(self.changes[i] for i in indexes))


class LlmCalls:
    """The LLM as one run sees it: counts calls, tokens, cost and prompts; stops at the limits."""

    def __init__(self, client: LlmClient | None, *, budget: Budget | None, max_calls: int) -> None:
        self._client = client
        self._budget = budget
        self._max_calls = max_calls
        self.calls = 0
        self.usage: LlmUsage | None = None
        self._prompts: dict[tuple[Any, ...], dict[str, Any]] = {}

    @property
    def available(self) -> bool:
        return self._client is not None and self._client.configured

    @property
    def model(self) -> str | None:
        return self._client.model if self._client is not None and self.calls else None

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return list(self._prompts.values())

    def ask(self, prompt: RenderedPrompt, schema: type[T]) -> T:
        """Send one prompt; return its validated reply. Raise RunLimitReached at the call cap."""
        if self._client is None:
            raise RuntimeError("LlmCalls.ask without a client; check .available first")
        if self.calls >= self._max_calls:
            raise RunLimitReached(self._max_calls)
        try:
            reply = self._client.complete(prompt, schema, budget=self._budget)
        except BudgetExhausted:
            raise  # refused before anything was sent: not a call
        except LlmError as exc:
            self._sent(prompt)
            if isinstance(exc, LlmInvalidReply) and exc.usage is not None:
                self._add(exc.usage)
            raise
        self._sent(prompt)
        self._add(reply.usage)
        for record in reply.prompt_records():
            self._note(record)
        return reply.value

    def record_info(self) -> dict[str, Any]:
        """What a record stores about the run's LLM use."""
        usage = self.usage
        return {
            "model": self.model,
            "prompts": self.prompts,
            "tokens_in": usage.prompt_tokens if usage else 0,
            "tokens_out": usage.completion_tokens if usage else 0,
            "cost": usage.cost if usage else None,
        }

    def _sent(self, prompt: RenderedPrompt) -> None:
        self.calls += 1
        self._note(prompt_record(prompt, self.model or ""))

    def _add(self, usage: LlmUsage) -> None:
        self.usage = usage if self.usage is None else self.usage + usage

    def _note(self, record: dict[str, Any]) -> None:
        self._prompts.setdefault(tuple(sorted(record.items())), record)


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """Everything a job run gets: the store, settings, namespace, the run's time and LLM."""

    store: Store
    settings: Settings
    namespace: str
    now: datetime
    llm: LlmCalls
    state: Mapping[str, Any]

    @property
    def repository(self) -> Repository:
        return self.store.repository

    @property
    def jobs(self) -> JobsSettings:
        return self.settings.jobs

    def watermark(self, key: str = "watermark") -> int:
        return int(self.state.get(key, 0))


class Job(ABC):
    """A maintenance job: ``plan()`` reads and may ask the LLM; ``apply()`` writes the plan."""

    name: ClassVar[str]
    # Has nothing to do without the LLM, so it is skipped at once when no model is configured.
    needs_llm: ClassVar[bool] = False
    # Reads neighbours through the vector index, so the outbox is synced before it runs.
    uses_index: ClassVar[bool] = False

    @abstractmethod
    def plan(self, ctx: JobContext) -> Plan: ...

    def apply(
        self, repository: Repository, plan: Plan, *, now: datetime, info: RecordInfo
    ) -> Applied:
        """Write exactly the plan, its record and its job state, in one transaction."""
        return apply_operations(
            repository,
            plan.namespace,
            self.name,
            plan.operations,
            now=now,
            info=info,
            job_state=plan.job_state,
        )

    def empty_plan(self, ctx: JobContext, **values: Any) -> Plan:
        return Plan(job=self.name, namespace=ctx.namespace, **values)


# -- helpers shared by the jobs -------------------------------------------------------------------


def ask_each(
    llm: LlmCalls, batches: Sequence[B], ask: Callable[[B], R]
) -> tuple[list[tuple[B, R]], str | None]:
    """Ask for each batch in order until the budget or the call cap stops the run.

    Return the answered batches (a prefix of ``batches``) and why the run stopped, if it did.
    Other LLM errors propagate: the run then fails and applies nothing.
    """
    answered: list[tuple[B, R]] = []
    for batch in batches:
        try:
            answered.append((batch, ask(batch)))
        except BudgetExhausted as exc:
            logger.warning("stopping after {} batch(es): {}", len(answered), exc)
            return answered, f"budget exhausted: {exc}"
        except RunLimitReached as exc:
            logger.info("stopping after {} batch(es): {}", len(answered), exc)
            return answered, str(exc)
    return answered, None


def chunks(items: Sequence[B], size: int) -> list[Sequence[B]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def advance(old: int, seen: Iterable[int], unfinished: Iterable[int] = ()) -> int:
    """Return the new watermark: every id at or below it has been dealt with.

    ``seen`` are the ids read this run; ``unfinished`` those of them left for a later run.
    """
    left = list(unfinished)
    if left:
        return max(old, min(left) - 1)
    return max([old, *seen])


def memories_after(
    repository: Repository,
    namespace: str,
    after_id: int,
    *,
    limit: int,
    types: Sequence[str] | None = None,
) -> list[MemoryView]:
    """Return the active memories with id above ``after_id``, oldest id first."""
    query = (
        select(Memory)
        .where(
            Memory.namespace == namespace,
            Memory.status == MemoryStatus.ACTIVE.value,
            Memory.id > after_id,
        )
        .order_by(Memory.id)
        .limit(limit)
    )
    if types is not None:
        query = query.where(Memory.type.in_(list(types)))
    with repository.reading() as session:
        return [MemoryView.of(row) for row in session.scalars(query)]


def active_views(
    repository: Repository, namespace: str, ids: Iterable[int]
) -> dict[int, MemoryView]:
    """Return the active memories of the namespace among ``ids``, by id."""
    rows = repository.active_memories(namespace, ids)
    return {memory_id: MemoryView.of(row) for memory_id, row in rows.items()}


def neighbours(
    store: Store, namespace: str, seeds: Sequence[MemoryView], *, per_seed: int, threshold: float
) -> list[Edge]:
    """Return pairs (seed, other memory) at least ``threshold`` similar, strongest first.

    Seeds are compared with each other directly (they may not be indexed yet) and with older
    memories through the vector index. Returned ids may include inactive memories when the
    index lags: callers keep only the ones SQL says are active.
    """
    if not seeds or per_seed <= 0:
        return []
    ids = [seed.id for seed in seeds]
    vectors = store.embedder.embed([seed.content for seed in seeds])
    best: dict[tuple[int, int], float] = {
        (a, b): s for a, b, s in similar_pairs(ids, vectors, threshold)
    }
    for seed, vector in zip(seeds, vectors, strict=True):
        found = 0
        # One more than wanted: the seed itself, if indexed, is its own nearest hit.
        for hit in store.index.query(namespace, vector, per_seed + 1):
            if hit.memory_id == seed.id or hit.similarity < threshold:
                continue
            pair = (min(seed.id, hit.memory_id), max(seed.id, hit.memory_id))
            best[pair] = max(best.get(pair, -1.0), hit.similarity)
            found += 1
            if found >= per_seed:
                break
    edges = [(a, b, s) for (a, b), s in best.items()]
    return sorted(edges, key=lambda edge: (-edge[2], edge[0], edge[1]))


def dropped_note(job: str, dropped: Iterable[int]) -> list[int]:
    """Log ids an LLM reply named that were not sent; return them sorted (for the stats)."""
    ids = sorted(set(dropped))
    if ids:
        logger.warning("{}: dropping ids the LLM named that were not in the batch: {}", job, ids)
    return ids


def tidy_tags(tags: Iterable[str], limit: int = 5) -> tuple[str, ...]:
    """Lower-case, trimmed, unique tags, in the order given, at most ``limit``."""
    out: list[str] = []
    for tag in tags:
        clean = tag.strip().lower()
        if clean and clean not in out:
            out.append(clean)
    return tuple(out[:limit])


# -- plans as JSON (pending plans wait in their record's stats) --------------------------------

_OPERATIONS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (CreateMemory, UpdateMemory, SetStatus, CreateRelation, InheritRelations, Purge)
}
_TUPLES = frozenset({"tags", "replaces_in_timeline", "from_ids"})


def encode_operation(op: Operation) -> dict[str, Any]:
    data: dict[str, Any] = {"op": type(op).__name__}
    for item in dataclasses.fields(op):
        data[item.name] = _plain(getattr(op, item.name))
    return data


def decode_operation(data: Mapping[str, Any]) -> Operation:
    """Rebuild an operation from ``encode_operation``'s output. Raise ValueError if malformed."""
    values = dict(data)
    cls = _OPERATIONS.get(str(values.pop("op", "")))
    if cls is None:
        raise ValueError(f"unknown operation {data.get('op')!r}")
    for name in _TUPLES & values.keys():
        values[name] = tuple(values[name])
    if "event_time" in values:
        values["event_time"] = parse_timestamp(values["event_time"])
    if "status" in values:
        values["status"] = MemoryStatus(values["status"])
    if cls is UpdateMemory and "event_time" in values["changes"]:
        changes = dict(values["changes"])
        changes["event_time"] = parse_timestamp(changes["event_time"])
        values["changes"] = changes
    op: Operation = cls(**values)
    return op


def encode_changes(changes: Sequence[Change]) -> list[dict[str, Any]]:
    return [
        {"label": c.label, "operations": [encode_operation(op) for op in c.operations]}
        for c in changes
    ]


def decode_changes(data: Sequence[Mapping[str, Any]]) -> tuple[Change, ...]:
    return tuple(
        Change(
            label=str(item["label"]),
            operations=tuple(decode_operation(op) for op in item["operations"]),
        )
        for item in data
    )


def referenced_memories(operations: Iterable[Operation]) -> set[int]:
    """Every existing memory id the operations name (to re-check them before approval)."""
    ids: set[int] = set()
    for op in operations:
        if isinstance(op, UpdateMemory | Purge):
            ids.add(op.memory_id)
        elif isinstance(op, SetStatus):
            ids.add(op.memory_id)
            ids.update(r for r in (op.replaced_by,) if isinstance(r, int))
        elif isinstance(op, CreateMemory):
            ids.update(op.replaces_in_timeline)
        elif isinstance(op, CreateRelation):
            ids.update(r for r in (op.source, op.target) if isinstance(r, int))
        else:
            ids.update(op.from_ids)
            ids.update(r for r in (op.to,) if isinstance(r, int))
    return ids


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, MemoryStatus):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value
