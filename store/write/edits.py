"""Corrections a person or an agent makes: edit a memory, delete it, forget it.

Each writes through the one writer (``Writer.unit``) as a record of its own: an edit and a delete
with before/after images, shown in the memory's history, re-indexed through the outbox and
undone by `secretary undo`; a forget as an erasure record that undo refuses (see
store.write.forget).
An edit or delete given the version the caller read (``If-Match``, ``--version``) is refused with
VersionConflict, writing nothing, if the memory changed since.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import checkpoint, session_factory
from store.errors import StoreError, ValidationFailed
from store.kinds import MemoryStatus
from store.models import Memory
from store.operations import UPDATABLE
from store.text import content_hash
from store.write.apply import change_memory
from store.write.forget import ForgetPlan, ForgetSelection, erase, erasure_stats, plan_forget
from store.write.record_info import RecordInfo
from store.write.unit import UnitOfWork
from store.write.writer import Writer

# What a person may change on a memory: what a plan may, and whether it is pinned.
EDITABLE = UPDATABLE | {"pinned"}


class VersionConflict(StoreError):
    """The memory changed since the caller read it; nothing was written."""

    exit_code = 4

    def __init__(self, memory_id: int, expected: int, current: int) -> None:
        self.memory_id = memory_id
        self.current = current
        super().__init__(
            f"memory {memory_id} is at version {current}, not {expected}: it changed since you"
            " read it; read it again and retry"
        )


class NotActive(StoreError):
    """Only an active memory can be edited or deleted."""

    exit_code = 4

    def __init__(self, memory_id: int, status: str, replaced_by: int | None) -> None:
        self.memory_id = memory_id
        by = f" (replaced by {replaced_by})" if replaced_by is not None else ""
        super().__init__(f"memory {memory_id} is {status}{by}: only active memories change")


@dataclass(frozen=True, kw_only=True)
class Edited:
    record_id: int | None  # None: the edit changed nothing
    memory_id: int
    version: int  # the memory's version now


def edit(
    writer: Writer,
    namespace: str,
    memory_id: int,
    changes: Mapping[str, Any],
    *,
    now: datetime,
    expected_version: int | None = None,
    by: str | None = None,
) -> Edited:
    """Change fields of an active memory (names in EDITABLE) as one record of job "edit".

    Raise NotFound, NotActive, VersionConflict or ValidationFailed (an unknown field); nothing
    is written then.
    """
    unknown = sorted(set(changes) - EDITABLE)
    if unknown:
        raise ValidationFailed([(name, "cannot be edited") for name in unknown])
    info = RecordInfo(stats={"memory": memory_id, "by": by} if by else {"memory": memory_id})
    with writer.unit(namespace, "edit", now, info) as unit:
        memory = _changeable(unit, memory_id, expected_version)
        fields = dict(changes)
        if "content" in fields and content_hash(fields["content"]) == memory.content_hash:
            fields.pop("content")  # the same text: not a change
        change_memory(unit, memory, fields)
    return Edited(
        record_id=unit.record.id if unit.kept else None,
        memory_id=memory_id,
        version=memory.version,
    )


def delete(
    writer: Writer,
    namespace: str,
    memory_id: int,
    *,
    now: datetime,
    expected_version: int | None = None,
    by: str | None = None,
) -> Edited:
    """Delete an active memory: it becomes a tombstone (status "deleted", off the timeline and
    out of search), undoable until retention purges it. Raise NotFound, NotActive or
    VersionConflict."""
    info = RecordInfo(stats={"memory": memory_id, "by": by} if by else {"memory": memory_id})
    with writer.unit(namespace, "delete", now, info) as unit:
        memory = _changeable(unit, memory_id, expected_version)
        unit.touch(memory)
        unit.splice_out(memory)
        memory.status = MemoryStatus.DELETED.value
    return Edited(record_id=unit.record.id, memory_id=memory_id, version=memory.version)


def _changeable(unit: UnitOfWork, memory_id: int, expected: int | None) -> Memory:
    memory = unit.memory(memory_id)
    if memory.status != MemoryStatus.ACTIVE:
        raise NotActive(memory_id, memory.status, memory.replaced_by_id)
    if expected is not None and memory.version != expected:
        raise VersionConflict(memory_id, expected, memory.version)
    return memory


# -- forgetting --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ForgetResult:
    record_id: int | None  # the erasure record (None for a dry run)
    plan: ForgetPlan


def forget(
    writer: Writer,
    namespace: str,
    selection: ForgetSelection,
    *,
    now: datetime,
    by: str | None = None,
    dry_run: bool = False,
) -> ForgetResult:
    """Erase the selected memories and conversation log lines everywhere (see
    store.write.forget); irreversible.

    ``dry_run`` returns what would go and writes nothing. Raise ValidationFailed for an empty
    selection or a log filter that makes no sense (``since`` after ``until``, a blank value),
    NotFound for an id, external id or idempotency key the namespace does not hold.
    """
    if selection.empty:
        raise ValidationFailed(
            [("selection", "name ids, external ids, a filter, log lines, or all")]
        )
    if selection.log_filter is not None:
        problems = selection.log_filter.problems()
        if problems:
            raise ValidationFailed([(f"log_filter.{where}", what) for where, what in problems])
    if dry_run:
        with session_factory(writer.engine)() as session:
            return ForgetResult(record_id=None, plan=plan_forget(session, namespace, selection))
    with writer.unit(namespace, "forget", now) as unit:
        plan = plan_forget(unit.session, namespace, selection)
        erase(unit, plan)
        unit.record.stats = erasure_stats(plan, by=by)
        unit.keep()
    # The log still holds the pages as they were; fold it into the (zero-filled) file.
    checkpoint(writer.engine)
    return ForgetResult(record_id=unit.record.id, plan=plan)
