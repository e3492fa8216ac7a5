"""Plan operations: the only changes a maintenance job can ask for, as frozen values.

A job's ``plan()`` returns a sequence of these; ``store.apply.apply_operations`` performs them
with their record in one transaction. A ``Ref`` names an existing memory by id or a memory the
same plan creates by its ``key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from store.models import MemoryStatus

Ref = int | str

# Fields a plan may change on an existing memory.
UPDATABLE = frozenset({"content", "type", "tags", "importance", "metadata", "event_time"})


@dataclass(frozen=True, kw_only=True)
class CreateMemory:
    """A new memory, linked into the timeline at ``event_time``."""

    key: str
    content: str
    type: str
    event_time: datetime
    importance: int = 5
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = "secretary"
    # Memories whose timeline place this one takes (they are spliced out of the timeline).
    replaces_in_timeline: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UpdateMemory:
    memory_id: int
    changes: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class SetStatus:
    """Supersede, merge, archive (or re-activate) a memory; never a delete."""

    memory_id: int
    status: MemoryStatus
    replaced_by: Ref | None = None


@dataclass(frozen=True, kw_only=True)
class CreateRelation:
    source: Ref
    target: Ref
    type: str
    strength: float
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class InheritRelations:
    """Copy every relation of ``from_ids`` (to memories outside them) onto ``to``."""

    from_ids: tuple[int, ...]
    to: Ref


@dataclass(frozen=True, kw_only=True)
class Purge:
    """Remove a tombstone (retention only): the row, its relations, its timeline place."""

    memory_id: int


Operation = CreateMemory | UpdateMemory | SetStatus | CreateRelation | InheritRelations | Purge


def touched_memories(operations: tuple[Operation, ...] | list[Operation]) -> set[int]:
    """Return the ids of existing memories that the operations change (for guardrails)."""
    ids: set[int] = set()
    for op in operations:
        if isinstance(op, UpdateMemory | SetStatus | Purge):
            ids.add(op.memory_id)
        elif isinstance(op, CreateMemory):
            ids.update(op.replaces_in_timeline)
    return ids
