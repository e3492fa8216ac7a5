"""A change set: every write of one transaction, turned into the operations of its record.

The repository opens a change set per transaction, tells it which rows it creates or is about to
modify, and calls ``finish()`` before commit. ``finish()`` writes the ordered operations with
before/after images, bumps ``version`` where content changed, queues the vector index through the
outbox, and bumps the namespace revision. Nothing else writes those tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.images import CONTENT_FIELDS, memory_image, relation_image
from store.models import (
    IndexOutbox,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    MemoryStatus,
    NamespaceState,
)


@dataclass
class _Touched:
    kind: str  # "memory" | "relation"
    row: Memory | MemoryRelation
    before: dict[str, Any] | None
    deleted: bool = False


@dataclass
class ChangeSet:
    session: Session
    record: MaintenanceRecord
    now: datetime
    # Set when the transaction changed nothing and its record was dropped.
    empty: bool = False
    # Undo restores images as they were: no version bump then.
    restoring: bool = False
    _touched: dict[tuple[str, int], _Touched] = field(default_factory=dict)
    _order: list[tuple[str, int]] = field(default_factory=list)

    def lock_namespace(self) -> NamespaceState:
        """Lock (PostgreSQL: row lock) and return the namespace's state row, creating it."""
        namespace = self.record.namespace
        state = self.session.execute(
            select(NamespaceState).where(NamespaceState.namespace == namespace).with_for_update()
        ).scalar_one_or_none()
        if state is None:
            state = NamespaceState(namespace=namespace, revision=0, updated_at=self.now)
            self.session.add(state)
            self.session.flush()
        return state

    def created(self, row: Memory | MemoryRelation) -> None:
        """Register a row this transaction created (it must be flushed, so it has an id)."""
        self._remember(row, before=None)

    def touch(self, row: Memory | MemoryRelation) -> None:
        """Register a row *before* modifying it, so that its before image is the stored one."""
        self._remember(row, before=self._image(row))

    def deleted(self, row: Memory | MemoryRelation) -> None:
        """Register a row about to be deleted (memories only by retention and undo)."""
        self._remember(row, before=self._image(row))
        self._touched[(_kind(row), row.id)].deleted = True

    def _remember(self, row: Memory | MemoryRelation, *, before: dict[str, Any] | None) -> None:
        key = (_kind(row), row.id)
        if key not in self._touched:
            self._touched[key] = _Touched(kind=key[0], row=row, before=before)
            self._order.append(key)

    @staticmethod
    def _image(row: Memory | MemoryRelation) -> dict[str, Any]:
        return memory_image(row) if isinstance(row, Memory) else relation_image(row)

    def finish(self) -> list[MaintenanceOperation]:
        """Write operations, version bumps, outbox rows and the namespace revision; flush."""
        self.session.flush()
        operations: list[MaintenanceOperation] = []
        for key in self._order:
            touched = self._touched[key]
            if isinstance(touched.row, Memory):
                if touched.deleted:
                    self._queue(touched.row, action="delete")
                else:
                    self._settle_memory(touched.row, touched.before)
            after = None if touched.deleted else self._image(touched.row)
            if touched.before is not None and touched.before == after:
                continue
            operations.append(
                MaintenanceOperation(
                    record_id=self.record.id,
                    seq=len(operations),
                    op=_op_name(touched),
                    target_kind=touched.kind,
                    target_id=key[1],
                    before=touched.before,
                    after=after,
                )
            )
        self.session.add_all(operations)
        if operations:
            state = self.lock_namespace()
            state.revision += 1
            state.updated_at = self.now
        self.session.flush()
        return operations

    def _settle_memory(self, memory: Memory, before: dict[str, Any] | None) -> None:
        if before is None:
            self._queue(memory)
            return
        after = memory_image(memory)
        if any(before[name] != after[name] for name in CONTENT_FIELDS):
            if not self.restoring:
                memory.version = before["version"] + 1
                memory.updated_at = self.now
            self._queue(memory)

    def _queue(self, memory: Memory, *, action: str | None = None) -> None:
        if action is None:
            action = "upsert" if memory.status == MemoryStatus.ACTIVE else "delete"
        self.session.add(
            IndexOutbox(
                namespace=memory.namespace, memory_id=memory.id, action=action, created_at=self.now
            )
        )


def _kind(row: Memory | MemoryRelation) -> str:
    return "memory" if isinstance(row, Memory) else "relation"


def _op_name(touched: _Touched) -> str:
    if touched.deleted:
        return f"delete_{touched.kind}"
    return f"{'create' if touched.before is None else 'update'}_{touched.kind}"
