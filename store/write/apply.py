"""Applying plan operations inside a unit of work: exactly the plan, in order.

``Writer.apply`` opens the unit (and so the transaction and the record) and hands each operation
to ``apply_operation``; a ``Ref`` that names a memory the same plan creates is resolved through
``created`` (plan key -> new memory id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select

from store.errors import NotFound, ValidationFailed
from store.kinds import UNDIRECTED, MemoryStatus, RelationType
from store.models import Memory, MemoryRelation
from store.neighbours import TIMELINE_WEIGHT, together
from store.operations import (
    UPDATABLE,
    CarryRecalls,
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    Ref,
    SetStatus,
    UpdateMemory,
)
from store.settings import RetrievalSettings
from store.text import content_hash
from store.write.forget import drop_images
from store.write.unit import UnitOfWork


def apply_operation(unit: UnitOfWork, op: Operation, created: MutableMapping[str, int]) -> None:
    """Perform one operation. Raise NotFound for a memory outside the namespace or an unknown
    plan key, ValidationFailed for an update of a field plans may not change or a purge of an
    active memory."""
    if isinstance(op, CreateMemory):
        _create(unit, op, created)
    elif isinstance(op, UpdateMemory):
        _update(unit, op)
    elif isinstance(op, SetStatus):
        _set_status(unit, op, created)
    elif isinstance(op, CreateRelation):
        source, target = _id(unit, op.source, created), _id(unit, op.target, created)
        relate(unit, source, target, op.type, op.strength, op.description)
    elif isinstance(op, InheritRelations):
        _inherit(unit, op, _id(unit, op.to, created))
    elif isinstance(op, CarryRecalls):
        carry_recalls(unit, unit.memory(op.from_id), unit.memory(_id(unit, op.to, created)))
    else:
        _purge(unit, op)


def relate(
    unit: UnitOfWork, source: int, target: int, type_: str, strength: float, text: str
) -> None:
    """Create a relation unless it exists or would join a memory to itself.

    A relation of an undirected type (`UNDIRECTED`) exists already if it runs the other way:
    merging a copy into the memory it copies must not give them a second link, #20 -> #1
    beside #1 -> #20.
    """
    same = and_(MemoryRelation.source_id == source, MemoryRelation.target_id == target)
    if type_ in UNDIRECTED:
        same = or_(
            same, and_(MemoryRelation.source_id == target, MemoryRelation.target_id == source)
        )
    exists = unit.session.scalars(
        select(MemoryRelation).where(same, MemoryRelation.type == type_)
    ).first()
    if exists is not None or source == target:
        return
    unit.add(
        MemoryRelation(
            namespace=unit.namespace,
            source_id=source,
            target_id=target,
            type=type_,
            strength=min(max(strength, 0.0), 1.0),
            description=text,
            created_at=unit.now,
        )
    )


def new_memory(
    namespace: str,
    *,
    content: str,
    type: str,
    tags: Iterable[str],
    importance: int,
    event_time: datetime,
    session_id: str | None,
    metadata: Mapping[str, Any],
    source: str,
    now: datetime,
    pinned: bool = False,
    external_id: str | None = None,
) -> Memory:
    """Return a new active memory row, never recalled, at version 1: the one place a memory is
    made (an ingested item, or a plan's ``CreateMemory``)."""
    return Memory(
        namespace=namespace,
        external_id=external_id,
        content=content,
        content_hash=content_hash(content),
        type=type,
        tags=list(tags),
        importance=importance,
        base_importance=float(importance),
        access_count=0,
        last_accessed=None,
        event_time=event_time,
        created_at=now,
        updated_at=now,
        session_id=session_id,
        status=MemoryStatus.ACTIVE.value,
        pinned=pinned,
        source=source,
        metadata_=dict(metadata),
        version=1,
    )


def _id(unit: UnitOfWork, ref: Ref, created: MutableMapping[str, int]) -> int:
    if isinstance(ref, int):
        return unit.memory(ref).id
    if ref not in created:
        raise NotFound("plan key", ref)
    return created[ref]


def _create(unit: UnitOfWork, op: CreateMemory, created: MutableMapping[str, int]) -> None:
    for memory_id in op.replaces_in_timeline:
        unit.splice_out(unit.memory(memory_id))
    memory = new_memory(
        unit.namespace,
        content=op.content,
        type=op.type,
        tags=op.tags,
        importance=op.importance,
        event_time=op.event_time,
        session_id=op.session_id,
        metadata=op.metadata,
        source=op.source,
        now=unit.now,
    )
    unit.add(memory)
    unit.link_into_timeline(memory, skip=op.replaces_in_timeline)
    created[op.key] = memory.id


def _set_status(unit: UnitOfWork, op: SetStatus, created: MutableMapping[str, int]) -> None:
    """Retire (or re-activate) a memory; only active memories stay on the timeline."""
    memory = unit.memory(op.memory_id)
    replaced_by = _id(unit, op.replaced_by, created) if op.replaced_by is not None else None
    was_active = memory.status == MemoryStatus.ACTIVE
    unit.touch(memory)
    if was_active and op.status != MemoryStatus.ACTIVE:
        unit.splice_out(memory)
    memory.status = op.status.value
    memory.replaced_by_id = replaced_by
    if not was_active and op.status == MemoryStatus.ACTIVE:
        unit.session.flush()
        unit.link_into_timeline(memory)


def _update(unit: UnitOfWork, op: UpdateMemory) -> None:
    unknown = set(op.changes) - UPDATABLE
    if unknown:
        raise ValidationFailed([("operation", f"cannot update {sorted(unknown)}")])
    change_memory(unit, unit.memory(op.memory_id), op.changes)


def change_memory(unit: UnitOfWork, memory: Memory, changes: Mapping[str, Any]) -> None:
    """Set fields of a memory (names as in ``UPDATABLE``, plus ``pinned``).

    A new event time moves an active memory to its new place in the timeline.
    """
    unit.touch(memory)
    moved = "event_time" in changes and changes["event_time"] != memory.event_time
    if moved and memory.status == MemoryStatus.ACTIVE:
        unit.splice_out(memory)
    for name, value in changes.items():
        if name == "importance":
            set_importance(memory, value)
            continue
        setattr(memory, "metadata_" if name == "metadata" else name, value)
        if name == "content":
            memory.content_hash = content_hash(value)
    if moved and memory.status == MemoryStatus.ACTIVE:
        unit.session.flush()
        unit.link_into_timeline(memory)


def set_importance(memory: Memory, importance: int) -> None:
    """Set a memory's importance; the score's base moves with it and keeps what recalls added
    (base_importance is importance plus the recall boost, see Writer.reinforce)."""
    boost = memory.base_importance - memory.importance
    memory.importance = importance
    memory.base_importance = min(10.0, max(float(importance), importance + boost))


def carry_recalls(unit: UnitOfWork, source: Memory, keeper: Memory) -> None:
    """Give ``keeper`` the recalls of ``source`` (see ``CarryRecalls``); ``source`` keeps its own,
    so that undoing both leaves each as it was."""
    if source.access_count == 0 and source.last_accessed is None:
        return
    unit.touch(keeper)
    keeper.access_count += source.access_count
    if keeper.last_accessed is None or (
        source.last_accessed is not None and source.last_accessed > keeper.last_accessed
    ):
        keeper.last_accessed = source.last_accessed
    boost = source.base_importance - source.importance
    keeper.base_importance = max(keeper.base_importance, min(10.0, keeper.importance + boost))


def _inherit(unit: UnitOfWork, op: InheritRelations, to: int) -> None:
    group = set(op.from_ids)
    relations = unit.session.scalars(
        select(MemoryRelation).where(
            MemoryRelation.namespace == unit.namespace,
            or_(MemoryRelation.source_id.in_(group), MemoryRelation.target_id.in_(group)),
        )
    ).all()
    for relation in relations:
        source = to if relation.source_id in group else relation.source_id
        target = to if relation.target_id in group else relation.target_id
        if source != target and not (source in group or target in group):
            relate(unit, source, target, relation.type, relation.strength, relation.description)
    if op.context:
        for memory_id in op.from_ids:
            for neighbour in _context(unit, unit.memory(memory_id)):
                if neighbour not in group:
                    text = f"said next to #{memory_id}, which it replaced"
                    relate(unit, to, neighbour, _TEMPORAL, TIMELINE_WEIGHT, text)


_TEMPORAL = RelationType.TEMPORAL.value
# The writer knows no operator's retrieval settings: "close in time" is the default window.
_CONTEXT_WINDOW = RetrievalSettings().timeline_window_minutes


def _context(unit: UnitOfWork, memory: Memory) -> list[int]:
    """The timeline neighbours of ``memory`` that activation passes to (see `together`)."""
    found = []
    for neighbour_id in (memory.prev_id, memory.next_id):
        neighbour = unit.session.get(Memory, neighbour_id) if neighbour_id is not None else None
        if neighbour is not None and together(
            memory.session_id,
            memory.event_time,
            neighbour.session_id,
            neighbour.event_time,
            _CONTEXT_WINDOW,
        ):
            found.append(neighbour.id)
    return found


def _purge(unit: UnitOfWork, op: Purge) -> None:
    memory = unit.memory(op.memory_id)
    if memory.status == MemoryStatus.ACTIVE:
        raise ValidationFailed(
            [("operation", f"memory {memory.id} is active; only tombstones are purged")]
        )
    unit.splice_out(memory)
    relations = unit.session.scalars(
        select(MemoryRelation).where(
            or_(MemoryRelation.source_id == memory.id, MemoryRelation.target_id == memory.id)
        )
    ).all()
    for relation in relations:
        unit.deleted(relation, erase=True)
        unit.session.delete(relation)
    # Rows that point at the tombstone as their replacement keep a dangling id otherwise.
    for other in unit.session.scalars(select(Memory).where(Memory.replaced_by_id == memory.id)):
        unit.touch(other)
        other.replaced_by_id = None
    unit.deleted(memory, erase=True)
    unit.session.flush()
    unit.session.delete(memory)
    # What retention purges leaves no content in the records that once changed it either.
    drop_images(unit.session, unit.namespace, {memory.id})
