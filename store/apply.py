"""Applying plan operations: exactly the plan, and its record, in one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from store.changeset import ChangeSet
from store.errors import NotFound, ValidationFailed
from store.models import MaintenanceRecord, Memory, MemoryRelation, MemoryStatus, RecordStatus
from store.operations import (
    UPDATABLE,
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    Ref,
    SetStatus,
    UpdateMemory,
)
from store.repository import Repository
from store.text import content_hash


@dataclass(frozen=True, kw_only=True)
class RecordInfo:
    """What the record of a run says besides its operations."""

    model: str | None = None
    prompts: Sequence[Mapping[str, Any]] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    status: str = "applied"
    error: str | None = None  # why a failed run failed


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """A pending (planned) record that the operations settle, in their transaction.

    The settled record's stats gain ``note`` and ``applied_as``: the id of the new record.
    """

    record_id: int
    status: str = RecordStatus.APPLIED.value
    note: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Applied:
    record_id: int | None
    created: Mapping[str, int]  # plan key -> new memory id


def apply_operations(
    repository: Repository,
    namespace: str,
    job: str,
    operations: Sequence[Operation],
    *,
    now: datetime,
    info: RecordInfo = RecordInfo(),
    job_state: Mapping[str, Any] | None = None,
    keep_empty_record: bool = False,
    resolve: Resolution | None = None,
) -> Applied:
    """Perform ``operations`` in order with one record; commit all or nothing.

    ``job_state`` (a watermark, say) is saved and ``resolve`` settled in the same transaction.
    If nothing changes, the record is dropped unless ``keep_empty_record`` (tokens were spent).
    Raise NotFound if an operation names a memory that is not in the namespace, or if the
    record to resolve is not pending (checked before any operation).
    """
    transaction = repository.changing(namespace, job, now, keep_empty=keep_empty_record)
    with transaction as (session, changes):
        _fill_record(changes.record, info)
        if resolve is not None:
            note = {**resolve.note, "applied_as": changes.record.id}
            repository.resolve_record(
                session, resolve.record_id, status=resolve.status, stats_update=note, now=now
            )
        applier = _Applier(session=session, changes=changes, namespace=namespace, now=now)
        for op in operations:
            applier.apply(op)
        if job_state is not None:
            repository.save_job_state(session, job, namespace, job_state, now=now)
    # A plan that changed nothing leaves no record (``changing`` removed it) unless kept.
    return Applied(
        record_id=None if changes.empty else changes.record.id, created=dict(applier.created)
    )


def record_refusal(
    repository: Repository, namespace: str, job: str, *, now: datetime, info: RecordInfo
) -> int:
    """Write a record without operations: a run refused or failed, or a plan stored for approval."""
    return repository.write_bare_record(namespace, job, now=now, **_info_values(info))


def _info_values(info: RecordInfo) -> dict[str, Any]:
    return {
        "model": info.model,
        "prompts": [dict(p) for p in info.prompts],
        "tokens_in": info.tokens_in,
        "tokens_out": info.tokens_out,
        "cost": info.cost,
        "stats": dict(info.stats),
        "status": info.status,
        "error": info.error,
    }


def _fill_record(record: MaintenanceRecord, info: RecordInfo) -> None:
    for name, value in _info_values(info).items():
        setattr(record, name, value)


@dataclass
class _Applier:
    session: Session
    changes: ChangeSet
    namespace: str
    now: datetime
    created: dict[str, int] = field(default_factory=dict)

    def apply(self, op: Operation) -> None:
        if isinstance(op, CreateMemory):
            self._create(op)
        elif isinstance(op, UpdateMemory):
            self._update(op)
        elif isinstance(op, SetStatus):
            self._set_status(op)
        elif isinstance(op, CreateRelation):
            self._relate(
                self._id(op.source), self._id(op.target), op.type, op.strength, op.description
            )
        elif isinstance(op, InheritRelations):
            self._inherit(op)
        else:
            self._purge(op)

    def _memory(self, memory_id: int) -> Memory:
        memory = self.session.get(Memory, memory_id)
        if memory is None or memory.namespace != self.namespace:
            raise NotFound("memory", memory_id)
        return memory

    def _id(self, ref: Ref) -> int:
        if isinstance(ref, int):
            return self._memory(ref).id
        if ref not in self.created:
            raise NotFound("plan key", ref)
        return self.created[ref]

    def _create(self, op: CreateMemory) -> None:
        for memory_id in op.replaces_in_timeline:
            self._splice_out(self._memory(memory_id))
        memory = Memory(
            namespace=self.namespace,
            content=op.content,
            content_hash=content_hash(op.content),
            type=op.type,
            tags=list(op.tags),
            importance=op.importance,
            base_importance=float(op.importance),
            access_count=0,
            event_time=op.event_time,
            created_at=self.now,
            updated_at=self.now,
            session_id=op.session_id,
            status=MemoryStatus.ACTIVE.value,
            pinned=False,
            source=op.source,
            metadata_=dict(op.metadata),
            version=1,
        )
        self.session.add(memory)
        self.session.flush()
        self.changes.created(memory)
        Repository.link_into_timeline(
            self.session, self.changes, memory, skip=op.replaces_in_timeline
        )
        self.created[op.key] = memory.id

    def _update(self, op: UpdateMemory) -> None:
        unknown = set(op.changes) - UPDATABLE
        if unknown:
            raise ValidationFailed([("operation", f"cannot update {sorted(unknown)}")])
        memory = self._memory(op.memory_id)
        self.changes.touch(memory)
        for name, value in op.changes.items():
            setattr(memory, "metadata_" if name == "metadata" else name, value)
            if name == "content":
                memory.content_hash = content_hash(value)

    def _set_status(self, op: SetStatus) -> None:
        memory = self._memory(op.memory_id)
        replaced_by = self._id(op.replaced_by) if op.replaced_by is not None else None
        self.changes.touch(memory)
        memory.status = op.status.value
        memory.replaced_by_id = replaced_by

    def _relate(self, source: int, target: int, type_: str, strength: float, text: str) -> None:
        exists = self.session.scalars(
            select(MemoryRelation).where(
                MemoryRelation.source_id == source,
                MemoryRelation.target_id == target,
                MemoryRelation.type == type_,
            )
        ).first()
        if exists is not None or source == target:
            return
        relation = MemoryRelation(
            namespace=self.namespace,
            source_id=source,
            target_id=target,
            type=type_,
            strength=min(max(strength, 0.0), 1.0),
            description=text,
            created_at=self.now,
        )
        self.session.add(relation)
        self.session.flush()
        self.changes.created(relation)

    def _inherit(self, op: InheritRelations) -> None:
        to = self._id(op.to)
        group = set(op.from_ids)
        relations = self.session.scalars(
            select(MemoryRelation).where(
                MemoryRelation.namespace == self.namespace,
                or_(MemoryRelation.source_id.in_(group), MemoryRelation.target_id.in_(group)),
            )
        ).all()
        for relation in relations:
            source = to if relation.source_id in group else relation.source_id
            target = to if relation.target_id in group else relation.target_id
            if source != target and not (source in group or target in group):
                self._relate(source, target, relation.type, relation.strength, relation.description)

    def _splice_out(self, memory: Memory) -> None:
        """Take a memory out of the timeline, joining its neighbours."""
        prev = self.session.get(Memory, memory.prev_id) if memory.prev_id else None
        nxt = self.session.get(Memory, memory.next_id) if memory.next_id else None
        self.changes.touch(memory)
        if prev is not None:
            self.changes.touch(prev)
            prev.next_id = nxt.id if nxt is not None else None
        if nxt is not None:
            self.changes.touch(nxt)
            nxt.prev_id = prev.id if prev is not None else None
        memory.prev_id = memory.next_id = None
        self.session.flush()

    def _purge(self, op: Purge) -> None:
        memory = self._memory(op.memory_id)
        if memory.status == MemoryStatus.ACTIVE:
            raise ValidationFailed(
                [("operation", f"memory {memory.id} is active; only tombstones are purged")]
            )
        self._splice_out(memory)
        relations = self.session.scalars(
            select(MemoryRelation).where(
                or_(MemoryRelation.source_id == memory.id, MemoryRelation.target_id == memory.id)
            )
        ).all()
        for relation in relations:
            self.changes.deleted(relation)
            self.session.delete(relation)
        # Rows that point at the tombstone as their replacement keep a dangling id otherwise.
        for other in self.session.scalars(select(Memory).where(Memory.replaced_by_id == memory.id)):
            self.changes.touch(other)
            other.replaced_by_id = None
        self.changes.deleted(memory)
        self.session.flush()
        self.session.delete(memory)
