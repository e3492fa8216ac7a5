"""Plan operations: the only changes a maintenance job can ask for, as frozen values.

A job's ``plan()`` returns a sequence of these; ``Writer.apply`` performs them with their record
in one transaction. A ``Ref`` names an existing memory by id or a memory the same plan creates by
its ``key``. Also here: which existing memories a plan names or changes, and the JSON form in
which a plan waits for approval in its record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from store.clock import parse_timestamp
from store.kinds import MemoryStatus

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
    """Copy every relation of ``from_ids`` (to memories outside them) onto ``to``.

    With ``context``, ``to`` is also related to each of their timeline neighbours that belongs
    together with it (same session, or close in time): an update said weeks later takes the
    place of the fact it replaces in that fact's context, so spreading still reaches it from
    there once the old fact has left the timeline.
    """

    from_ids: tuple[int, ...]
    to: Ref
    context: bool = False


@dataclass(frozen=True, kw_only=True)
class CarryRecalls:
    """Add the recall statistics of ``from_id`` to ``to``: an exact duplicate merged into it.

    ``to`` gets the recall count added, the later of the two last recalls, and the greater of
    the two recall boosts (base_importance over importance). Recall statistics are not content:
    nothing is re-embedded and protection does not count it as a change; undo takes it back.
    """

    from_id: int
    to: Ref


@dataclass(frozen=True, kw_only=True)
class Purge:
    """Remove a tombstone (retention only): the row, its relations, its timeline place."""

    memory_id: int


Operation = (
    CreateMemory
    | UpdateMemory
    | SetStatus
    | CreateRelation
    | InheritRelations
    | CarryRecalls
    | Purge
)


def referenced_ids(operations: Iterable[Operation]) -> set[int]:
    """Every existing memory id the operations name (approval re-checks them before applying)."""
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
        elif isinstance(op, CarryRecalls):
            ids.update(r for r in (op.from_id, op.to) if isinstance(r, int))
        else:
            ids.update(op.from_ids)
            ids.update(r for r in (op.to,) if isinstance(r, int))
    return ids


def changed_ids(operations: Iterable[Operation]) -> set[int]:
    """The existing memories the operations merge, supersede, archive or rewrite (guardrails).

    Purges are not among them: they remove tombstones, counted apart.
    """
    ids: set[int] = set()
    for op in operations:
        if isinstance(op, SetStatus | UpdateMemory):
            if isinstance(op, UpdateMemory) or op.status != MemoryStatus.ACTIVE:
                ids.add(op.memory_id)
        elif isinstance(op, CreateMemory):
            # Taking a memory's place in the timeline only happens when it is merged away.
            ids.update(op.replaces_in_timeline)
    return ids


# -- plans as JSON (a plan awaiting approval waits in its record's stats) ------------------------

_CLASSES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        CreateMemory,
        UpdateMemory,
        SetStatus,
        CreateRelation,
        InheritRelations,
        CarryRecalls,
        Purge,
    )
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
    cls = _CLASSES.get(str(values.pop("op", "")))
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
