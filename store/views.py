"""Frozen views of stored rows: what every read outside the writer returns.

A view is a copy of a row's values taken inside the read's transaction, so it can be passed
around, cached and compared without a database session, and nothing can write through it.
``store.reads`` builds them; this module imports no database code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, kw_only=True)
class MemoryView:
    """One memory, every column (``metadata`` is the ``metadata`` column)."""

    id: int
    namespace: str
    external_id: str | None
    content: str
    content_hash: str
    type: str
    tags: tuple[str, ...]
    importance: int
    base_importance: float
    access_count: int
    last_accessed: datetime | None
    event_time: datetime
    created_at: datetime
    updated_at: datetime
    session_id: str | None
    prev_id: int | None
    next_id: int | None
    status: str
    replaced_by_id: int | None
    pinned: bool
    source: str
    metadata: Mapping[str, Any]
    version: int


@dataclass(frozen=True, kw_only=True)
class LogView:
    """One conversation log line."""

    id: int
    session_id: str
    role: str
    content: str
    timestamp: datetime


@dataclass(frozen=True, kw_only=True)
class JobStateView:
    """A job's state in one namespace: what its plans start from, and how its runs went."""

    job: str
    namespace: str
    state: Mapping[str, Any]  # watermarks
    health: Mapping[str, Any]  # last outcome, failures in a row, back-off, quarantine
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class Edge:
    """A relation as spreading activation and the jobs read it."""

    source_id: int
    target_id: int
    type: str
    strength: float


@dataclass(frozen=True, kw_only=True)
class OperationView:
    """One step of a record, with its before/after images (None: the row did not exist)."""

    seq: int
    op: str
    target_kind: str  # "memory" | "relation"
    target_id: int
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class RecordView:
    """A maintenance record without its operations."""

    id: int
    job: str
    namespace: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    model: str | None
    prompts: Sequence[Mapping[str, Any]]
    tokens_in: int
    tokens_out: int
    cost: float | None
    stats: Mapping[str, Any]
    error: str | None
    undoes_id: int | None
    undone_by_id: int | None


@dataclass(frozen=True, kw_only=True)
class RelationView:
    """A relation as seen from one of its memories: which way it points and the other end."""

    id: int
    direction: str  # "out": this memory is the source; "in": the target
    other_id: int
    other_type: str
    other_status: str
    other_content: str
    type: str
    strength: float
    description: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class NamespaceView:
    """A namespace and what it holds."""

    namespace: str
    memories: int  # active
    retired: int  # superseded, merged, archived or deleted, not yet purged
    logs: int
