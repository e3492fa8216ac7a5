"""The whole store as JSON lines, and back: `secretary export --all` and `secretary import`.

The export holds every memory (any status) and relation, every conversation log line, every
maintenance record with its operations (before/after images), the jobs' state (watermarks,
health) and the schedule overrides, each kind by id (see store.exports.lines for the lines). It
is deterministic: exporting a store, importing it into an empty one and exporting that gives
the same bytes. What a store derives or holds only while running is left out: the vector index
and its outbox (rebuilt from the memories), the namespaces' revisions, leases and dream requests.

An import writes everything in one transaction, or nothing. It brings the records with it, so
it writes no record of its own (and is not undone by `secretary undo`); the vector index follows
through the outbox. Rows already stored as in the file are skipped; an id (external id,
idempotency key, edge) that a row with other content holds is a conflict. Into another
namespace (``namespace``), the file must hold one namespace and the target none: every id is
moved past those the store has used (store.exports.remap), and schedules, which belong to a
store, stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Engine, Select, func, select
from sqlalchemy.orm import Session

from store.db import session_factory, transaction
from store.errors import IdConflict, ValidationFailed
from store.exports.lines import Export
from store.exports.remap import move
from store.exports.restoring import (
    advance_ids,
    check_export,
    insert_job_states,
    insert_logs,
    insert_memories,
    insert_records,
    insert_schedules,
    largest_id,
    log_image,
    new_relations,
    record_image,
    row_image,
)
from store.images import memory_image, relation_image
from store.kinds import MemoryStatus
from store.models import (
    ConversationLog,
    IndexOutbox,
    JobState,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    NamespaceState,
    ScheduleEntry,
)
from store.reads.memories import export_line

_BATCH = 1000
Row = TypeVar("Row")


def export_store(engine: Engine) -> Iterator[str]:
    """Yield the whole store as deterministic JSON lines (see the module docstring)."""
    with session_factory(engine)() as session:
        for memory in _all(session, select(Memory).order_by(Memory.id)):
            yield export_line({"kind": "memory", **memory_image(memory)})
        for relation in _all(session, select(MemoryRelation).order_by(MemoryRelation.id)):
            yield export_line({"kind": "relation", **relation_image(relation)})
        for log in _all(session, select(ConversationLog).order_by(ConversationLog.id)):
            yield export_line({"kind": "log", **log_image(log)})
        yield from _records(session)
        for state in _all(session, select(JobState).order_by(JobState.namespace, JobState.job)):
            yield export_line({"kind": "job_state", **row_image(state)})
        for entry in _all(session, select(ScheduleEntry).order_by(ScheduleEntry.job)):
            yield export_line({"kind": "schedule", **row_image(entry)})


def _all(session: Session, query: Select[Row]) -> Iterator[Row]:
    return iter(session.scalars(query.execution_options(yield_per=_BATCH)))


def _records(session: Session) -> Iterator[str]:
    """Records by id, each with its operations (read alongside, in record and step order)."""
    steps = _all(
        session,
        select(MaintenanceOperation).order_by(
            MaintenanceOperation.record_id, MaintenanceOperation.seq
        ),
    )
    pending = next(steps, None)
    for record in _all(session, select(MaintenanceRecord).order_by(MaintenanceRecord.id)):
        operations = []
        while pending is not None and pending.record_id <= record.id:
            if pending.record_id == record.id:
                operations.append(pending)
            pending = next(steps, None)
        yield export_line({"kind": "record", **record_image(record, operations)})


@dataclass(frozen=True, kw_only=True)
class ImportReport:
    added: dict[str, int]  # kind -> lines written
    present: int  # lines skipped: stored as they are in the file
    namespace: str | None  # the namespace it was moved into, if asked
    schedules_left: int  # schedule lines not imported (a move into a namespace)

    @property
    def total(self) -> int:
        return sum(self.added.values())


def import_export(
    engine: Engine, export: Export, *, now: datetime, namespace: str | None = None
) -> ImportReport:
    """Write a validated export into the store, in one transaction (see the module docstring).

    Raise ValidationFailed for a link to a row neither in the file nor the store, a relation
    that joins two namespaces, or a move into a namespace that is not empty or from a file of
    several namespaces; IdConflict for ids held by rows with other content. Nothing is written
    then.
    """
    schedules_left = 0
    with transaction(session_factory(engine, write=True)) as session:
        if namespace is not None:
            schedules_left = len(export.schedules)
            export = move(export, namespace, _offset(session, export, namespace))
        checked = check_export(session, export)
        if checked.problems:
            raise ValidationFailed(checked.problems)
        if checked.conflicts:
            raise IdConflict(checked.conflicts)
        memories = insert_memories(session, checked.new("memory", export.memories))
        relations = new_relations(checked.new("relation", export.relations))
        session.add_all(relations)
        logs = checked.new("log", export.logs)
        insert_logs(session, logs)
        records = checked.new("record", export.records)
        insert_records(session, records)
        states = checked.new("job_state", export.job_states)
        insert_job_states(session, states)
        schedules = checked.new("schedule", export.schedules)
        insert_schedules(session, schedules)
        session.add_all(
            IndexOutbox(namespace=m.namespace, memory_id=m.id, action="upsert", created_at=now)
            for m in memories
            if m.status == MemoryStatus.ACTIVE
        )
        _bump_revisions(session, {m.namespace for m in memories}, now)
        session.flush()
        advance_ids(session)
    added = {
        "memory": len(memories),
        "relation": len(relations),
        "log": len(logs),
        "record": len(records),
        "job_state": len(states),
        "schedule": len(schedules),
    }
    return ImportReport(
        added=added,
        present=len(checked.present),
        namespace=namespace,
        schedules_left=schedules_left,
    )


def _offset(session: Session, export: Export, namespace: str) -> int:
    """Check that the export can move into ``namespace``; return the id offset to move by."""
    names = export.namespaces()
    if len(names) > 1:
        raise ValidationFailed(
            [("file", f"holds namespaces {', '.join(names)}: --namespace moves one namespace")]
        )
    tables = (
        ("memories", Memory),
        ("conversation logs", ConversationLog),
        ("records", MaintenanceRecord),
        ("job state", JobState),
    )
    held = [
        what
        for what, model in tables
        if session.scalar(select(func.count()).where(model.namespace == namespace))
    ]
    if held:
        raise ValidationFailed(
            [
                (
                    "--namespace",
                    f"namespace {namespace!r} already holds {', '.join(held)}: "
                    "import into a namespace that holds nothing",
                )
            ]
        )
    return largest_id(session)


def _bump_revisions(session: Session, namespaces: set[str], now: datetime) -> None:
    """Tell the lexical caches that these namespaces changed, with ids they may have seen
    pass already (restored rows keep theirs): they compare themselves with SQL."""
    for namespace in sorted(namespaces):
        state = session.get(NamespaceState, namespace)
        if state is None:
            session.add(
                NamespaceState(namespace=namespace, revision=1, rewritten=1, updated_at=now)
            )
        else:
            state.revision += 1
            state.rewritten += 1
            state.updated_at = now
