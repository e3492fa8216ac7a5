"""Maintenance records: undoing one, as a record of its own.

An undo walks the record's operations in reverse and writes every before image back in one
transaction, through a restoring unit of work (``Writer.unit(..., restoring=True)``): versions
are restored rather than bumped, and the vector index follows through the outbox. The undo
record names what it undid (``undoes_id``);
the undone record points back (``undone_by_id``) and gets status "undone". Undoing an undo puts
the original back in force, so the original may be undone again later.

Recall statistics (access_count, last_accessed, base_importance) are neither compared nor
restored on rows that still exist: a recall after a record is not a change to what it did, and
undo must not forget that the memory was recalled. A conversation log line an ingest updated
is put back as it was, as a memory is. Conflict checks live in store.write.undo_conflicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import session_factory
from store.errors import NotFound, StoreError
from store.images import log_values, memory_values, relation_values
from store.kinds import RecordStatus
from store.models import (
    ConversationLog,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
)
from store.write.apply import set_importance
from store.write.undo_conflicts import (
    LINK_FIELDS,
    RECALL_FIELDS,
    Action,
    Conflict,
    UndoStep,
    find_conflicts,
    kept_links,
    read_snapshot,
    strip_recall,
)
from store.write.unit import UnitOfWork
from store.write.writer import Writer

# -- errors ------------------------------------------------------------------------------------


class AlreadyUndone(StoreError):
    def __init__(self, record_id: int, undone_by: int) -> None:
        self.record_id = record_id
        self.undone_by = undone_by
        super().__init__(
            f"record {record_id} was already undone by record {undone_by}; "
            f"undo record {undone_by} to put it back in force"
        )


class NothingToUndo(StoreError):
    def __init__(self, record_id: int, status: str) -> None:
        super().__init__(f"record {record_id} ({status}) changed nothing that undo could restore")


class ForgetIsFinal(StoreError):
    def __init__(self, record_id: int) -> None:
        super().__init__(
            f"record {record_id} is a forget: it erased the content by design, so nothing can"
            " bring it back (this is what an erasure request asks for)"
        )


class UndoConflict(StoreError):
    """Rows changed after the record; nothing was written. ``conflicts`` lists them."""

    def __init__(self, record_id: int, conflicts: Sequence[Conflict], *, forced: bool) -> None:
        self.record_id = record_id
        self.conflicts = tuple(conflicts)
        shown = "; ".join(conflict.describe() for conflict in self.conflicts[:20])
        more = f" (and {len(self.conflicts) - 20} more)" if len(self.conflicts) > 20 else ""
        hint = (
            "every part conflicts, so even forcing (--force) has nothing to apply"
            if forced
            else "forcing it (--force) applies the parts that do not conflict"
        )
        super().__init__(
            f"record {record_id} cannot be undone, nothing written: {shown}{more}; {hint}"
        )


# -- the plan and the result -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UndoPlan:
    record_id: int
    namespace: str
    job: str
    steps: tuple[UndoStep, ...]  # in reverse operation order
    conflicts: tuple[Conflict, ...]

    @property
    def applicable(self) -> tuple[UndoStep, ...]:
        blocked = {(c.kind, c.target_id) for c in self.conflicts}
        return tuple(step for step in self.steps if step.key not in blocked)


@dataclass(frozen=True, kw_only=True)
class UndoResult:
    record_id: int  # the undo record
    undone_id: int
    restored: int
    skipped: tuple[Conflict, ...]


def steps_of(operations: Iterable[MaintenanceOperation]) -> tuple[UndoStep, ...]:
    """Return the steps that undo ``operations``, last operation first.

    Operations that differ only in recall statistics have nothing to undo and give no step.
    """
    steps: list[UndoStep] = []
    for op in sorted(operations, key=lambda o: o.seq, reverse=True):
        if op.before is None:
            action: Action = "delete"
        elif op.after is None:
            action = "recreate"
        elif strip_recall(op.before) == strip_recall(op.after):
            continue
        else:
            action = "restore"
        steps.append(
            UndoStep(
                seq=op.seq,
                kind=op.target_kind,
                target_id=op.target_id,
                action=action,
                image=op.before,
                expected=op.after,
            )
        )
    return tuple(steps)


# -- planning ----------------------------------------------------------------------------------


def _load(session: Session, record_id: int) -> tuple[MaintenanceRecord, UndoPlan]:
    """Read the record and plan its undo. Raise NotFound, AlreadyUndone or NothingToUndo."""
    record = session.get(MaintenanceRecord, record_id)
    if record is None:
        raise NotFound("record", record_id)
    if record.undone_by_id is not None:
        raise AlreadyUndone(record_id, record.undone_by_id)
    if record.job == "forget":
        raise ForgetIsFinal(record_id)
    operations = session.scalars(
        select(MaintenanceOperation).where(MaintenanceOperation.record_id == record_id)
    ).all()
    steps = steps_of(operations)
    if not steps:
        raise NothingToUndo(record_id, record.status)
    conflicts = find_conflicts(steps, read_snapshot(session, record.namespace, steps))
    plan = UndoPlan(
        record_id=record_id,
        namespace=record.namespace,
        job=record.job,
        steps=steps,
        conflicts=conflicts,
    )
    return record, plan


def plan_undo(writer: Writer, record_id: int) -> UndoPlan:
    """Return what undoing the record would restore, and what conflicts; write nothing."""
    with session_factory(writer.engine)() as session:
        return _load(session, record_id)[1]


# -- applying ----------------------------------------------------------------------------------


def undo(writer: Writer, record_id: int, *, now: datetime, force: bool = False) -> UndoResult:
    """Undo a record in one transaction, as a record of job "undo"; return that record.

    Raise UndoConflict (writing nothing) if rows changed since the record, unless ``force``:
    then the parts that do not conflict are applied and the undo record's stats list the rest.
    """
    with session_factory(writer.engine)() as session:
        record = session.get(MaintenanceRecord, record_id)
        if record is None:
            raise NotFound("record", record_id)
        namespace = record.namespace
    with writer.unit(namespace, "undo", now, restoring=True) as unit:
        # Planned again inside the transaction, under the namespace lock: nothing can change
        # between the conflict check and the writes.
        session = unit.session
        record, plan = _load(session, record_id)
        if plan.conflicts and not force:
            raise UndoConflict(record_id, plan.conflicts, forced=False)
        if not plan.applicable:
            raise UndoConflict(record_id, plan.conflicts, forced=True)
        _Restorer(unit).run(plan.applicable)
        undo_record = unit.record
        undo_record.undoes_id = record_id
        undo_record.stats = {
            "undoes": record_id,
            "previous_status": record.status,
            "restored": len(plan.applicable),
            "skipped": [conflict.as_json() for conflict in plan.conflicts],
        }
        session.flush()
        _mark_undone(session, record, by=undo_record)
    return UndoResult(
        record_id=undo_record.id,
        undone_id=record_id,
        restored=len(plan.applicable),
        skipped=plan.conflicts,
    )


def _mark_undone(session: Session, record: MaintenanceRecord, *, by: MaintenanceRecord) -> None:
    """Mark ``record`` undone by ``by``; if it was itself an undo, its target is back in force.

    That alternates down a chain of undos of undos: each level flips.
    """
    undone, undoer = record, by
    while True:
        undone.status = RecordStatus.UNDONE.value
        undone.undone_by_id = undoer.id
        if undone.undoes_id is None:
            return
        back = session.get(MaintenanceRecord, undone.undoes_id)
        if back is None:  # records are never deleted; a missing one leaves nothing to flip
            return
        back.status = str(undone.stats.get("previous_status", RecordStatus.APPLIED.value))
        back.undone_by_id = None
        if back.undoes_id is None:
            return
        following = session.get(MaintenanceRecord, back.undoes_id)
        if following is None:
            return
        undone, undoer = following, back


class _Restorer:
    """Writes the steps in an order that every immediate foreign key check accepts."""

    def __init__(self, unit: UnitOfWork) -> None:
        self.session = unit.session
        self.changes = unit

    def run(self, steps: Sequence[UndoStep]) -> None:
        def picked(kind: str, action: Action) -> list[UndoStep]:
            return [s for s in steps if s.kind == kind and s.action == action]

        # Recreated memories come first, unlinked, so that restored rows can point at them;
        # their own links are set once every row they point at exists again.
        recreated = self._recreate_memories(picked("memory", "recreate"))
        for step in picked("memory", "restore"):
            self._restore_memory(step)
        self.session.flush()
        for memory, links in recreated:
            for name, value in links.items():
                setattr(memory, name, value)
        self.session.flush()
        self._delete_relations(picked("relation", "delete"))
        for step in picked("relation", "recreate"):
            self._recreate_relation(step)
        for step in picked("relation", "restore"):
            self._restore_relation(step)
        for step in picked("log", "restore"):
            self._restore_log(step)
        self.session.flush()
        # Created memories go last: by now nothing restored points at them any more.
        self._delete_memories(picked("memory", "delete"))

    def _recreate_memories(self, steps: Sequence[UndoStep]) -> list[tuple[Memory, dict[str, Any]]]:
        rows: list[tuple[Memory, dict[str, Any]]] = []
        for step in steps:
            values = memory_values(step.image or {})
            links = {name: values.pop(name) for name in LINK_FIELDS}
            memory = Memory(**values)
            self.session.add(memory)
            rows.append((memory, links))
        self.session.flush()
        for memory, _ in rows:
            self.changes.created(memory)
        return rows

    def _restore_memory(self, step: UndoStep) -> None:
        memory = self.session.get(Memory, step.target_id)
        assert memory is not None  # the plan checked it exists, under the namespace lock
        self.changes.touch(memory)
        derived = kept_links(step)  # links the record did not change stay as they are now
        for name, value in memory_values(step.image or {}).items():
            if name in derived:
                continue
            if name == "importance":
                set_importance(memory, value)  # the recall boost stays, as recalls do
            elif name not in RECALL_FIELDS and name != "id":
                setattr(memory, name, value)

    def _recreate_relation(self, step: UndoStep) -> None:
        relation = MemoryRelation(**relation_values(step.image or {}))
        self.session.add(relation)
        self.session.flush()
        self.changes.created(relation)

    def _restore_relation(self, step: UndoStep) -> None:
        relation = self.session.get(MemoryRelation, step.target_id)
        assert relation is not None  # the plan checked it exists, under the namespace lock
        self.changes.touch(relation)
        for name, value in relation_values(step.image or {}).items():
            if name != "id":
                setattr(relation, name, value)

    def _restore_log(self, step: UndoStep) -> None:
        line = self.session.get(ConversationLog, step.target_id)
        assert line is not None  # the plan checked it exists, under the namespace lock
        self.changes.touch(line)
        for name, value in log_values(step.image or {}).items():
            if name != "id":
                setattr(line, name, value)

    def _delete_relations(self, steps: Sequence[UndoStep]) -> None:
        rows = [self.session.get(MemoryRelation, step.target_id) for step in steps]
        self._delete([row for row in rows if row is not None])

    def _delete_memories(self, steps: Sequence[UndoStep]) -> None:
        rows = [self.session.get(Memory, step.target_id) for step in steps]
        present = [row for row in rows if row is not None]
        for row in present:
            self.changes.deleted(row)  # before the links change: the image is the stored row
        # Links among the rows going away would otherwise depend on the order of deletes.
        for row in present:
            row.prev_id = row.next_id = row.replaced_by_id = None
        self.session.flush()
        self._delete(present)

    def _delete(self, rows: Sequence[Memory | MemoryRelation]) -> None:
        for row in rows:
            self.changes.deleted(row)
            self.session.delete(row)
        self.session.flush()
