"""What the API answers, as frozen values: memories, hits with their score breakdown, pages,
records, forgets, undos, dream requests.

``parse(cls, data)`` builds any of them from the JSON the API sent: fields by name (unknown
keys ignored, so a newer server still parses), ISO-8601 times as aware datetimes, arrays as
tuples, nested values by their declared type.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypedDict, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from secretary.client.errors import SecretaryError


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Every term of a hit's score, the parts of its match (all unweighted), and its
    relevance: 0-1, comparable across queries and stores (see docs/retrieval.md#relevance)."""

    relevance: float
    match: float = 0.0  # the weighted parts, ranking within one query (older servers: 0)
    lexical: float
    dense: float
    session: float
    period: float
    importance: float
    recency: float
    activation: float
    score: float


@dataclass(frozen=True, kw_only=True)
class Hit:
    """A memory a search found, with its score, the score's breakdown and how it was found
    (``via``: "anchor" from the indexes, "spread" by association)."""

    id: int
    external_id: str | None
    content: str
    type: str
    tags: tuple[str, ...]
    importance: int
    event_time: datetime
    session_id: str | None
    metadata: dict[str, Any]
    score: float
    breakdown: Breakdown
    via: str


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    hits: tuple[Hit, ...]
    degraded: tuple[str, ...]  # why the search answered with less than both indexes, if it did


@dataclass(frozen=True, kw_only=True)
class Recalled:
    """A hit as an agent needs it: its id, text, type, event time and one score (the hit's
    relevance, rounded to 2 decimals); the full breakdown only when asked for (``detail``)."""

    id: int
    text: str
    type: str
    time: datetime
    score: float
    breakdown: Breakdown | None = None

    @property
    def line(self) -> str:
        """The hit in one line for a model's context: ``#12 event 2026-03-02 0.87 the text``."""
        return f"#{self.id} {self.type} {self.time.date().isoformat()} {self.score:.2f} {self.text}"


@dataclass(frozen=True, kw_only=True)
class Recall:
    """A search's hits, best first, in the few characters an agent's context can spare."""

    hits: tuple[Recalled, ...]
    degraded: tuple[str, ...]  # why the search answered with less than both indexes, if it did

    def lines(self) -> str:
        """Every hit's ``line``, one a line (what to paste into a prompt)."""
        return "\n".join(hit.line for hit in self.hits)


def recalled(result: SearchResult, *, detail: bool = False) -> Recall:
    """Given a search's answer, return its hits as an agent's ``Recall`` (with each hit's
    breakdown only if ``detail``)."""
    hits = tuple(
        Recalled(
            id=hit.id,
            text=hit.content,
            type=hit.type,
            time=hit.event_time,
            score=round(hit.breakdown.relevance, 2),
            breakdown=hit.breakdown if detail else None,
        )
        for hit in result.hits
    )
    return Recall(hits=hits, degraded=result.degraded)


@dataclass(frozen=True, kw_only=True)
class Memory:
    """One memory, any status. Send ``version`` back to edit or delete only what you read."""

    id: int
    external_id: str | None
    content: str
    type: str
    tags: tuple[str, ...]
    importance: int
    event_time: datetime
    session_id: str | None
    metadata: dict[str, Any]
    namespace: str
    status: str
    version: int
    replaced_by: int | None  # what took a superseded or merged memory's place
    pinned: bool
    source: str
    base_importance: float
    access_count: int
    last_accessed: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class Page:
    """A page of memories by id; pass ``next_cursor`` for the next (None: this was the last)."""

    memories: tuple[Memory, ...]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True)
class AddResult:
    """Ids of the items in input order; which were created, which updated (on_conflict)."""

    ids: tuple[int, ...]
    created: tuple[int, ...]
    updated: tuple[int, ...]
    record_id: int | None


@dataclass(frozen=True, kw_only=True)
class Edited:
    memory: Memory
    record_id: int | None  # None: the edit changed nothing


@dataclass(frozen=True, kw_only=True)
class Deleted:
    id: int
    status: str
    record_id: int


@dataclass(frozen=True, kw_only=True)
class Forgotten:
    id: int
    content_hash: str
    why: str


@dataclass(frozen=True, kw_only=True)
class ForgetResult:
    """What a forget erased (or, as a dry run, would erase): memories, relations, log lines."""

    dry_run: bool
    record_id: int | None  # the erasure record; None for a dry run
    memories: tuple[Forgotten, ...]
    relations: int
    logs: int  # how many conversation log lines
    log_ids: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Skipped:
    kind: str
    target_id: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class UndoResult:
    record_id: int | None  # the undo's own record (undo it to redo); None: nothing to undo
    undone_id: int
    restored: int
    skipped: tuple[Skipped, ...]  # conflicting parts left as they are (force only)
    # The record changed nothing undo could restore (a failed or refused run): nothing written.
    nothing_to_undo: str | None = None
    cascaded: tuple[int, ...] = ()  # later records undone with it, newest first (cascade)


@dataclass(frozen=True, kw_only=True)
class Namespace:
    namespace: str
    memories: int  # active
    retired: int  # superseded, merged, archived or deleted
    logs: int


@dataclass(frozen=True, kw_only=True)
class Relation:
    """A relation seen from one memory: ``direction`` "out" if that memory is the source."""

    id: int
    direction: str
    other_id: int
    other_type: str
    other_status: str
    other_content: str
    type: str
    strength: float
    description: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class RecordRef:
    """A record as a memory's history lists it."""

    id: int
    job: str
    namespace: str
    status: str
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class Record(RecordRef):
    """A maintenance record (one per ingest batch, job run, edit, delete, forget or undo)."""

    undoes_id: int | None
    undone_by_id: int | None
    duration_seconds: float | None
    changes_by_kind: dict[str, int]
    tokens_in: int
    tokens_out: int
    cost: float | None
    error: str | None
    reason: str | None  # why the run was refused, stopped early or its LLM part skipped
    # What the run did in words ("applied nothing; dropped 10 items; 800 + 27 tokens"), and
    # how many items it dropped or quarantined (older servers: empty and 0).
    summary: str = ""
    dropped_count: int = 0
    quarantined_count: int = 0


@dataclass(frozen=True, kw_only=True)
class Operation:
    seq: int
    op: str
    target_kind: str
    target_id: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class DroppedItem:
    item: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class RecordDetail(Record):
    model: str | None
    prompts: tuple[dict[str, Any], ...]
    stats: dict[str, Any]
    operations: tuple[Operation, ...]
    dropped: tuple[DroppedItem, ...]
    quarantined: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class DiffEntry:
    kind: str
    line: str
    ids: tuple[int, ...]
    details: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RecordDiff:
    """What a record changed, told readably (``lines``) and entry by entry."""

    record: dict[str, Any]
    changes_by_kind: dict[str, int]
    entries: tuple[DiffEntry, ...]
    lines: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DreamAccepted:
    id: int  # the first request; the only one unless the key has several namespaces
    ids: tuple[int, ...]
    daemon_running: bool
    # Why the dream will do less than asked (the server runs it and has no model); None if not.
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class DreamOutcome:
    job: str
    namespace: str
    status: str
    record_id: int | None
    message: str
    records: tuple[int, ...] = ()  # every record the run wrote (a job of two parts: two)


@dataclass(frozen=True, kw_only=True)
class DreamRequest:
    id: int
    namespace: str | None  # None: every namespace with work
    jobs: tuple[str, ...]  # empty: every job
    retry_quarantined: bool
    requested_by: str
    requested_at: datetime
    status: str  # pending, running, done, failed
    picked_by: str | None
    started_at: datetime | None
    finished_at: datetime | None
    outcomes: tuple[DreamOutcome, ...]
    error: str | None


@dataclass(frozen=True, kw_only=True)
class Health:
    """``/healthz`` and ``/readyz``: ``status`` "ok", "degraded" (a part is down or incomplete:
    searches answer with what they have) or "error" (no database)."""

    status: str
    database: str
    outbox: int | None
    warm: bool  # false while the start-up warm-up still loads indexes
    # Each part's report (reachable, rebuilding, miscounted...); None from older servers.
    vector_index: dict[str, Any] | None = None
    lexical_index: dict[str, Any] | None = None


class Status(TypedDict):
    """``GET /v1/status``: the daemon, the schedule, each namespace's jobs (see the README)."""

    now: str
    daemon: dict[str, Any]  # the first running daemon (or the last one seen)
    daemons: list[dict[str, Any]]  # each running daemon and what it runs now
    night: dict[str, Any]  # the open firings: units done, running and left, estimated end
    budget: dict[str, Any]
    schedule: list[dict[str, Any]]
    namespaces: list[dict[str, Any]]


T = TypeVar("T")


class UnexpectedAnswer(SecretaryError):
    """The server answered 2xx with JSON this client does not understand (another version?)."""

    def __init__(self, what: str) -> None:
        super().__init__(None, f"unexpected answer from the API: {what}")


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return get_type_hints(cls, vars(sys.modules[cls.__module__]))


def parse(cls: type[T], data: Any) -> T:
    """Given a dataclass above and the API's JSON for it, return the value.

    Raise UnexpectedAnswer if a field is missing or of another kind.
    """
    return cast(T, _value(cls, data, cls.__name__))


def _value(kind: Any, data: Any, where: str) -> Any:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _value(inner, data, where)
    if origin is tuple:
        _expect(isinstance(data, list), where, "an array")
        return tuple(_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(data))
    if origin is dict or kind is dict:
        _expect(isinstance(data, dict), where, "an object")
        return dict(data)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        _expect(isinstance(data, dict), where, "an object")
        hints = _hints(kind)
        fields = dataclasses.fields(kind)
        missing = [f.name for f in fields if f.name not in data and _required(f)]
        _expect(not missing, where, f"fields {', '.join(missing)}")
        given = [f.name for f in fields if f.name in data]
        return kind(**{name: _value(hints[name], data[name], f"{where}.{name}") for name in given})
    if kind is datetime:
        _expect(isinstance(data, str), where, "an ISO-8601 time")
        try:
            return datetime.fromisoformat(data)
        except ValueError:
            raise UnexpectedAnswer(f"{where} is not an ISO-8601 time: {data!r}") from None
    if kind is float:
        _expect(isinstance(data, int | float) and not isinstance(data, bool), where, "a number")
        return float(data)
    if kind in (int, str, bool):
        _expect(type(data) is kind, where, f"a {kind.__name__}")
        return data
    return data  # Any


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise UnexpectedAnswer(f"{where}: expected {what}")
