"""The one writer: every change to the store, with its record, through a unit of work.

``Writer.unit`` opens a transaction, writes the record, locks the namespace and yields the
``UnitOfWork`` (``store.write.unit``); on leaving the block the unit finishes (operations, outbox,
revision) and everything commits together, or nothing does. The entry points below are the
store's writes: ingestion (memories and conversation log lines) and restore, plan apply (job
runs, approvals, records of runs that changed nothing), and the bookkeeping that is not content
(recall statistics, the outbox). Undo writes through ``unit`` too (``store.write.undo``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, update

from store.conflicts import (
    UPDATE_HINT,
    OnConflict,
    default_labels,
    given_fields,
    log_fields,
    resolve_logs,
    resolve_memories,
)
from store.db import chunks, session_factory, transaction
from store.errors import IdConflict, StoreError, ValidationFailed
from store.exports.lines import (
    NAMESPACE_KINDS,
    WHOLE_STORE_LINE,
    in_order,
    other_namespace,
    parse_export,
)
from store.exports.restoring import advance_ids, check_export, insert_memories, new_relations
from store.models import ConversationLog, IndexOutbox, MaintenanceRecord, Memory
from store.operations import UPDATABLE, CreateMemory, Operation, UpdateMemory, referenced_ids
from store.schemas import LogIn, MemoryIn
from store.write.apply import apply_operation, new_memory
from store.write.record_info import RecordInfo, Settlement
from store.write.stale import drop_overtaken, present
from store.write.unit import UnitOfWork, job_row, lock_namespace

# A record that says nothing besides its operations (ingestion, restore, undo).
PLAIN = RecordInfo()


class LinesForgotten(StoreError):
    """A plan would make memories of conversation lines that a forget erased meanwhile."""

    def __init__(self, line_ids: Sequence[int]) -> None:
        self.line_ids = tuple(line_ids)
        shown = ", ".join(f"#{i}" for i in self.line_ids[:20])
        more = f" and {len(self.line_ids) - 20} more" if len(self.line_ids) > 20 else ""
        super().__init__(
            f"the plan makes memories of conversation lines that were forgotten while it was"
            f" planned ({shown}{more}); nothing written: the next run reads what is left"
        )


@dataclass(frozen=True, kw_only=True)
class AddResult:
    """What an add call did: one id per input item, in input order, and which were new."""

    ids: tuple[int, ...]
    created: tuple[int, ...]
    record_id: int | None
    updated: tuple[int, ...] = ()  # stored rows given an item's other content (on_conflict)
    relations: int = 0  # lines of relations a restore read; created: those it added
    relations_created: int = 0

    @property
    def skipped(self) -> int:
        return len(self.ids) - len(self.created) - len(self.updated)


@dataclass(frozen=True, kw_only=True)
class Applied:
    record_id: int | None  # None: nothing changed and nothing asked for a record
    created: Mapping[str, int]  # plan key -> new memory id
    operations: int  # the operations the record holds


class Writer:
    """Writes of the store over one engine; every content change goes through ``unit``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._write = session_factory(engine, write=True)

    @contextmanager
    def unit(
        self,
        namespace: str,
        job: str,
        now: datetime,
        info: RecordInfo = PLAIN,
        *,
        restoring: bool = False,
    ) -> Iterator[UnitOfWork]:
        """Open a write transaction with its record; commit both or neither (see store.write.unit).

        ``restoring`` (undo) writes images back as they were: no version bump.
        """
        with transaction(self._write) as session:
            record = MaintenanceRecord(
                job=job,
                namespace=namespace,
                status=info.outcome.status.value,
                started_at=now,
                finished_at=now,
                stats=dict(info.stats),
                prompts=[],
            )
            unit = UnitOfWork(session, record, now=now, restoring=restoring)
            unit.describe(info)  # before the INSERT, which then writes it (no UPDATE after)
            session.add(record)
            session.flush()
            unit.lock_namespace()
            yield unit
            unit.finish()

    # -- plans -----------------------------------------------------------------------------------

    def apply(
        self,
        namespace: str,
        job: str,
        operations: Sequence[Operation],
        *,
        now: datetime,
        info: RecordInfo = PLAIN,
        job_state: Mapping[str, Any] | None = None,
        health: Mapping[str, Any] | None = None,
        settle: Settlement | None = None,
    ) -> Applied:
        """Perform ``operations`` in order with one record; commit all or nothing.

        ``job_state`` (a watermark, say) and ``health`` (how the job's runs went) are saved
        and ``settle`` settled in the same transaction. The record's outcome is
        ``info.outcome``; one of "applied" that changed nothing is dropped unless it settles a
        plan (whose record then points at it). Raise NotFound if an operation names a memory
        that is not in the namespace, or if the record to settle is not pending (checked
        before any operation); LinesForgotten if a memory it creates cites a conversation line
        that is gone (a forget erased it while the run planned: nothing can bring it back).
        """
        created: dict[str, int] = {}
        with self.unit(namespace, job, now, info) as unit:
            _check_sources(unit, operations)
            drop_overtaken(unit)  # a plan stored for approval, or refused by the cap
            if settle is not None:
                note = {**settle.note, "applied_as": unit.record.id}
                unit.settle(replace(settle, note=note))
                unit.keep()  # the settled record points at this one
            unit.load_memories(referenced_ids(operations))
            for op in operations:
                apply_operation(unit, op, created)
            if job_state is not None:
                unit.save_job_state(job, job_state)
            if health is not None:
                unit.save_job_health(job, health)
        return Applied(
            record_id=unit.record.id if unit.kept else None,
            created=created,
            operations=unit.operations,
        )

    def save_health(
        self, namespace: str, job: str, health: Mapping[str, Any], *, now: datetime
    ) -> None:
        """Save how a job's runs went (see ``JobState.health``), under the namespace's lock, and
        nothing else: no record, as ``apply`` with no operations would write and drop one."""
        with transaction(self._write) as session:
            lock_namespace(session, namespace, now)
            job_row(session, job, namespace, now).health = dict(health)

    # -- ingestion and restore -------------------------------------------------------------------

    def add_memories(
        self,
        namespace: str,
        items: Sequence[MemoryIn],
        *,
        now: datetime,
        job: str = "ingest",
        source: str = "api",
        on_conflict: OnConflict = "error",
        labels: Sequence[str] | None = None,
    ) -> AddResult:
        """Insert the memories that are not there yet, linked into the namespace's timeline.

        An item is already there when its ``external_id`` exists in the namespace or, without
        one, when a memory with the same content, session and (if given) timestamp exists (see
        store.conflicts). One that is there with other content is a conflict: raise IdConflict
        naming each such item (``labels``, by default "item N"), writing nothing, unless
        ``on_conflict`` is "update": then the memory takes the item's fields, a change with its
        before/after images in this batch's record (undoable).
        """
        labels = list(labels) if labels is not None else default_labels(len(items))
        info = RecordInfo(stats={"items": len(items)})
        with self.unit(namespace, job, now, info) as unit:
            resolution = resolve_memories(unit.session, namespace, items, labels)
            update = on_conflict == "update"
            problems = resolution.conflicts(labels, update=update, hint=UPDATE_HINT)
            if problems:
                raise IdConflict(problems)
            slots: list[int | Memory] = []  # each item's memory: stored id, or new row
            new: list[Memory] = []
            updated: list[int] = []
            for index, item in enumerate(items):
                found = resolution.found.get(index)
                if index in resolution.repeats:
                    slots.append(slots[resolution.repeats[index]])
                elif found is not None:
                    if found.differs:
                        _update_memory(unit, found.row_id, item)
                        updated.append(found.row_id)
                    slots.append(found.row_id)
                else:
                    new.append(_new_memory(namespace, item, now=now, source=source))
                    slots.append(new[-1])
            unit.add_all(new)
            unit.link_all_into_timeline(new)
            ids = [slot if isinstance(slot, int) else slot.id for slot in slots]
            created = [memory.id for memory in new]
            if updated:
                unit.record.stats = {**unit.record.stats, "updated": len(updated)}
        record_id = unit.record.id if unit.kept else None
        return AddResult(
            ids=tuple(ids), created=tuple(created), updated=tuple(updated), record_id=record_id
        )

    def add_logs(
        self,
        namespace: str,
        items: Sequence[LogIn],
        *,
        now: datetime,
        on_conflict: OnConflict = "error",
        labels: Sequence[str] | None = None,
    ) -> AddResult:
        """Insert conversation log lines not seen before (by idempotency key).

        A key that is there with other content is a conflict (IdConflict, nothing written)
        unless ``on_conflict`` is "update": then the line takes the item's fields, a change
        with its before/after images in this batch's record (job "ingest", undoable). New
        lines are the daemon's input, not a change: a batch that updates nothing leaves no
        record (and a memory already extracted from an updated line stays as it is).
        """
        labels = list(labels) if labels is not None else default_labels(len(items))
        info = RecordInfo(stats={"items": len(items)})
        with self.unit(namespace, "ingest", now, info) as unit:
            session = unit.session
            resolution = resolve_logs(session, namespace, items, labels)
            problems = resolution.conflicts(
                labels, update=on_conflict == "update", hint=UPDATE_HINT
            )
            if problems:
                raise IdConflict(problems)
            ids: list[int] = []
            created: list[int] = []
            updated: list[int] = []
            for index, item in enumerate(items):
                found = resolution.found.get(index)
                if index in resolution.repeats:
                    ids.append(ids[resolution.repeats[index]])
                    continue
                if found is not None:
                    if found.differs:
                        log = session.get(ConversationLog, found.row_id)
                        assert log is not None  # found in this transaction
                        unit.touch(log)
                        for name, value in log_fields(item).items():
                            setattr(log, name, value)
                        updated.append(found.row_id)
                    ids.append(found.row_id)
                    continue
                log = ConversationLog(
                    namespace=namespace,
                    session_id=item.session_id,
                    role=item.role,
                    content=item.content,
                    timestamp=item.timestamp,
                    pair_id=item.pair_id,
                    idempotency_key=item.key(),
                    created_at=now,
                )
                session.add(log)
                session.flush()
                ids.append(log.id)
                created.append(log.id)
            if updated:
                unit.record.stats = {**unit.record.stats, "updated": len(updated)}
        record_id = unit.record.id if unit.kept else None
        return AddResult(
            ids=tuple(ids), created=tuple(created), updated=tuple(updated), record_id=record_id
        )

    def restore(
        self,
        namespace: str,
        images: Sequence[Mapping[str, Any]],
        *,
        now: datetime,
        labels: Sequence[str] | None = None,
    ) -> AddResult:
        """Re-create the memories and relations of a namespace's export with their ids, as one
        "restore" record; lines stored as they are in the export are skipped.

        Raise ValidationFailed naming each bad line (``labels``, by default "item N"): a missing
        or mistyped field, a bad timestamp, a line of another namespace or of a whole-store
        export, a link to a memory neither in the export nor in the namespace, a relation that
        joins two namespaces. Raise IdConflict for an id (external id, edge) that a row with
        other content holds. Nothing is written then.
        """
        labels = list(labels) if labels is not None else default_labels(len(images))
        export, problems = parse_export(
            images, labels, kinds=NAMESPACE_KINDS, other_kinds=WHOLE_STORE_LINE
        )
        problems += [
            (entry.label, other_namespace(entry.line.namespace, namespace))
            for entry in (*export.memories, *export.relations)
            if entry.line.namespace != namespace
        ]
        if problems:
            raise ValidationFailed(in_order(problems, labels))
        with self.unit(namespace, "restore", now) as unit:
            checked = check_export(unit.session, export)
            if checked.problems:
                raise ValidationFailed(in_order(checked.problems, labels))
            if checked.conflicts:
                raise IdConflict(in_order(checked.conflicts, labels))
            memories = insert_memories(unit.session, checked.new("memory", export.memories))
            for memory in memories:
                unit.created(memory)
            relations = new_relations(checked.new("relation", export.relations))
            for relation in relations:
                unit.add(relation)
            advance_ids(unit.session)
        return AddResult(
            ids=tuple(entry.line.id for entry in export.memories),
            created=tuple(memory.id for memory in memories),
            record_id=unit.record.id if unit.kept else None,
            relations=len(export.relations),
            relations_created=len(relations),
        )

    # -- bookkeeping that is not content ---------------------------------------------------------

    def reinforce(
        self, counts: Mapping[int, int], *, now: datetime, step: float, max_boost: float
    ) -> None:
        """Record recalls: bump access_count and last_accessed, nudge base_importance (bounded).

        Recall statistics are not content: no version bump, no record, no index work.
        """
        by_count: dict[int, list[int]] = {}
        for memory_id, count in counts.items():
            by_count.setdefault(count, []).append(memory_id)
        least, greatest = (
            (func.min, func.max)
            if self.engine.dialect.name == "sqlite"
            else (func.least, func.greatest)
        )
        # Never above the cap, and never lowered by a recall if it already was above it.
        cap = least(10.0, Memory.importance + max_boost)
        with transaction(self._write) as session:
            for count, ids in sorted(by_count.items()):
                nudged = least(
                    Memory.base_importance + step * count, greatest(cap, Memory.base_importance)
                )
                for chunk in chunks(ids):
                    session.execute(
                        update(Memory)
                        .where(Memory.id.in_(chunk))
                        .values(
                            access_count=Memory.access_count + count,
                            last_accessed=now,
                            base_importance=nudged,
                        )
                        .execution_options(synchronize_session=False)
                    )

    def ack_outbox(self, ids: Sequence[int]) -> None:
        """Remove outbox entries that the index has applied."""
        with transaction(self._write) as session:
            for chunk in chunks(ids):
                session.execute(delete(IndexOutbox).where(IndexOutbox.id.in_(chunk)))


def _check_sources(unit: UnitOfWork, operations: Sequence[Operation]) -> None:
    """Raise LinesForgotten if a new memory cites a conversation line the namespace no longer
    holds. Lines go only by a forget, and ids are never reused (migration 0004): a run that
    read them before the forget must not bring their content back."""
    cited = {
        line
        for op in operations
        if isinstance(op, CreateMemory)
        for line in op.metadata.get("source_log_ids") or ()
        if isinstance(line, int)
    }
    gone = cited - present(unit.session, ConversationLog, unit.namespace, cited)
    if gone:
        raise LinesForgotten(sorted(gone))


def _new_memory(namespace: str, item: MemoryIn, *, now: datetime, source: str) -> Memory:
    return new_memory(
        namespace,
        external_id=item.external_id,
        content=item.content,
        type=item.type,
        tags=item.tags,
        importance=item.importance if item.importance is not None else 5,
        event_time=item.timestamp or now,
        session_id=item.session_id,
        metadata=item.metadata,
        source=source,
        now=now,
        pinned=item.pinned,
    )


def _update_memory(unit: UnitOfWork, memory_id: int, item: MemoryIn) -> None:
    """Give a stored memory the fields an item gives (a conflict resolved as an update)."""
    fields = given_fields(item)
    changes = {name: value for name, value in fields.items() if name in UPDATABLE}
    if "tags" in changes:
        changes["tags"] = list(item.tags)
    if "timestamp" in fields:
        changes["event_time"] = fields["timestamp"]
    # content is always among them, so the memory is touched (its before image taken) here
    apply_operation(unit, UpdateMemory(memory_id=memory_id, changes=changes), {})
    memory = unit.memory(memory_id)
    for name in ("session_id", "pinned"):
        if name in fields:
            setattr(memory, name, fields[name])
