"""The unit of work: one transaction that changes the store, with its maintenance record.

Every change to memories, relations, job state and records goes through a ``UnitOfWork``:
ingestion, restore, plan apply, approval and undo alike, and an ingest's updates of conversation
log lines (imaged like the rest, so that undo can take them back). It holds

- the transaction (opened and committed by ``Writer.unit``, see ``store.write.writer``),
- the record of the run, its outcome and what it says besides its operations,
- change tracking: rows created, touched (before modifying them) or deleted, turned by
  ``finish()`` into the record's ordered operations with before/after images, version bumps
  where content changed, outbox entries for the vector index and the namespace revision,
- the timeline: placing a memory between its neighbours and taking one out,
- the jobs' state (watermarks), saved in the same transaction as their changes.

A unit whose outcome is "applied" but that changed nothing leaves no record, unless it is asked
to keep it (an approval: the settled plan's record points at it). Nothing else writes those
tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from sqlalchemy import and_, bindparam, select, tuple_
from sqlalchemy.orm import Session

from store.clock import ensure_utc
from store.db import chunks
from store.errors import NotFound
from store.images import CONTENT_FIELDS, log_image, memory_image, relation_image
from store.kinds import MemoryStatus, Outcome
from store.models import (
    ConversationLog,
    IndexOutbox,
    JobState,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    NamespaceState,
)
from store.text import content_hash
from store.write.record_info import RecordInfo, Settlement

Row = Memory | MemoryRelation | ConversationLog

# A memory's place on the timeline is compared as a row value: SQLite and PostgreSQL answer
# "(event_time, id) < (?, ?)" with a range of ix_memories_timeline, where the same test
# spelled as an OR of two made SQLite walk the namespace's whole index (2 ms a lookup at 8,000
# memories, against 0.03 ms).
_MEMORIES = Memory.__table__.c
_PLACE = tuple_(_MEMORIES.event_time, _MEMORIES.id)
# Its parameters are typed as the columns: an aware time in another offset is compared as UTC,
# not as its wall clock.
_AT = tuple_(
    bindparam("event_time", type_=_MEMORIES.event_time.type),
    bindparam("id", type_=_MEMORIES.id.type),
)

_ON_TIMELINE = and_(
    _MEMORIES.namespace == bindparam("namespace"),
    _MEMORIES.status == MemoryStatus.ACTIVE.value,
)
# The active memory nearest before (after) a place: built once, run on the connection (the
# ORM's statement building and execution cost 1-2 ms per lookup).
_NEAREST_BEFORE = (
    select(_MEMORIES.id)
    .where(_ON_TIMELINE, _PLACE < _AT)
    .order_by(_MEMORIES.event_time.desc(), _MEMORIES.id.desc())
    .limit(1)
)
_NEAREST_AFTER = (
    select(_MEMORIES.id)
    .where(_ON_TIMELINE, _PLACE > _AT)
    .order_by(_MEMORIES.event_time, _MEMORIES.id)
    .limit(1)
)


def lock_namespace(session: Session, namespace: str, now: datetime) -> NamespaceState:
    """Lock (PostgreSQL: row lock) and return the namespace's state row, creating it."""
    state = session.execute(
        select(NamespaceState).where(NamespaceState.namespace == namespace).with_for_update()
    ).scalar_one_or_none()
    if state is None:
        state = NamespaceState(namespace=namespace, revision=0, rewritten=0, updated_at=now)
        session.add(state)
        session.flush()
    return state


def job_row(session: Session, job: str, namespace: str, now: datetime) -> JobState:
    """Return the job's state row of the namespace, created if missing, updated ``now``."""
    row = session.get(JobState, (job, namespace))
    if row is None:
        row = JobState(job=job, namespace=namespace, state={}, health={})
        session.add(row)
    row.updated_at = now
    return row


@dataclass
class _Tracked:
    kind: str  # "memory" | "relation" | "log"
    row: Row
    before: dict[str, Any] | None
    deleted: bool = False
    erase: bool = False  # its record keeps no image of it, only that it existed


class UnitOfWork:
    """One write transaction of one namespace and its record; see the module docstring."""

    def __init__(
        self, session: Session, record: MaintenanceRecord, *, now: datetime, restoring: bool
    ) -> None:
        self.session = session
        self.record = record
        self.namespace = record.namespace
        self.now = now
        # Undo writes images back as they were: versions are restored rather than bumped.
        self.restoring = restoring
        self.operations = 0  # written by finish()
        self.kept = True  # False once finish() dropped the record of a unit that changed nothing
        self._keep = False
        self._tracked: dict[tuple[str, int], _Tracked] = {}
        self._order: list[tuple[str, int]] = []
        self._loaded: list[Memory] = []  # rows `load_memories` read ahead
        # A change the lexical index cannot find as new ids (``_rewrites``): it compares itself
        # with SQL instead of extending itself.
        self._rewrote = False
        # The namespace's state row once locked: it stays locked, and so unchanged by others,
        # until the transaction ends, so finish() bumps its revision without reading it again.
        self._state: NamespaceState | None = None

    # -- the record ------------------------------------------------------------------------------

    def describe(self, info: RecordInfo) -> None:
        """Set what the record says besides its operations."""
        record = self.record
        record.status = info.outcome.status.value
        record.model = info.model
        record.prompts = [dict(p) for p in info.prompts]
        record.tokens_in = info.tokens_in
        record.tokens_out = info.tokens_out
        record.cost = info.cost
        record.stats = dict(info.stats)
        record.error = info.error
        record.finished_at = info.finished_at or self.now
        self._keep = self._keep or info.outcome is not Outcome.APPLIED

    def keep(self) -> None:
        """Keep this unit's record even if it changes nothing (another record points at it)."""
        self._keep = True

    def settle(self, settlement: Settlement) -> MaintenanceRecord:
        """Settle a pending record in this transaction.

        Raise NotFound if no record by that id is pending.
        """
        pending = self.session.get(MaintenanceRecord, settlement.record_id)
        if pending is None or pending.status not in settlement.pending:
            raise NotFound("pending record", settlement.record_id)
        pending.status = settlement.status.value
        # Its finished_at stays the planning run's end, so its duration is the run's, not the
        # time it waited for a decision; when it was decided is said beside it.
        decided = {"decided_at": ensure_utc(self.now).isoformat()}
        pending.stats = {**(pending.stats or {}), **settlement.note, **decided}
        return pending

    def save_job_state(self, job: str, state: Mapping[str, Any]) -> None:
        """Save the job's plan state (watermarks) in this transaction."""
        self._job_row(job).state = dict(state)

    def save_job_health(self, job: str, health: Mapping[str, Any]) -> None:
        """Save how the job's runs went (see ``JobState.health``) in this transaction."""
        self._job_row(job).health = dict(health)

    def _job_row(self, job: str) -> JobState:
        return job_row(self.session, job, self.namespace, self.now)

    def job_state(self, job: str) -> dict[str, Any]:
        row = self.session.get(JobState, (job, self.namespace))
        return dict(row.state) if row is not None else {}

    def lock_namespace(self) -> NamespaceState:
        """Lock (PostgreSQL: row lock) and return the namespace's state row, creating it.

        Taken at the start of every unit: it serialises the writers of one namespace.
        """
        self._state = lock_namespace(self.session, self.namespace, self.now)
        return self._state

    # -- rows ------------------------------------------------------------------------------------

    def memory(self, memory_id: int) -> Memory:
        """Return the memory row of this namespace. Raise NotFound if there is none."""
        memory = self.session.get(Memory, memory_id)
        if memory is None or memory.namespace != self.namespace:
            raise NotFound("memory", memory_id)
        return memory

    def load_memories(self, memory_ids: Iterable[int]) -> None:
        """Read these memory rows into the session in a query per chunk, so that `memory`
        finds them there instead of reading them one at a time (a plan's relations name a
        memory or two each); ids that are not there are left for `memory` to refuse."""
        for ids in chunks(sorted(set(memory_ids))):
            # Held here: the session's identity map keeps only rows referenced elsewhere.
            self._loaded.extend(self.session.scalars(select(Memory).where(Memory.id.in_(ids))))

    def add(self, row: Row) -> None:
        """Insert a new row and register it (it gets its id)."""
        self.add_all([row])

    def add_all(self, rows: Sequence[Row]) -> None:
        """Insert new rows in one flush (one multi-row INSERT per table) and register them."""
        self.session.add_all(rows)
        self.session.flush()
        for row in rows:
            self.created(row)

    def created(self, row: Row) -> None:
        """Register a row this transaction created (it must be flushed, so it has an id)."""
        self._remember(row, before=None)

    def touch(self, row: Row) -> None:
        """Register a row *before* modifying it, so that its before image is the stored one."""
        self._remember(row, before=_image(row))

    def deleted(self, row: Row, *, erase: bool = False) -> None:
        """Register a row about to be deleted (memories only by retention and undo).

        ``erase``: the record keeps a tombstone of it (id and hash), not its image (retention's
        purge drops what it purges).
        """
        self._remember(row, before=_image(row))
        tracked = self._tracked[(_kind(row), row.id)]
        tracked.deleted = True
        tracked.erase = erase

    def forget_row(self, memory: Memory) -> None:
        """Delete a memory for good, leaving no image of it in this unit's record; the vector
        index drops it through the outbox."""
        key = ("memory", memory.id)
        if key in self._tracked:  # touched as a neighbour of another forgotten memory
            del self._tracked[key]
            self._order.remove(key)
        self._queue(memory, action="delete")
        self._rewrote = True
        self.session.delete(memory)

    def _remember(self, row: Row, *, before: dict[str, Any] | None) -> None:
        key = (_kind(row), row.id)
        if key not in self._tracked:
            self._tracked[key] = _Tracked(kind=key[0], row=row, before=before)
            self._order.append(key)

    # -- the timeline ----------------------------------------------------------------------------

    def link_into_timeline(self, memory: Memory, *, skip: Iterable[int] = ()) -> None:
        """Place a flushed memory between its neighbours by (event_time, id).

        Only active memories are on the timeline (a retired one left it, joining its
        neighbours), and ``skip`` are about to leave it.
        """
        at, mid = memory.event_time, memory.id
        others = and_(
            Memory.namespace == self.namespace,
            Memory.id.not_in([mid, *skip]),
            Memory.status == MemoryStatus.ACTIVE.value,
        )
        here = {"event_time": at, "id": mid}
        pred = self.session.scalars(
            select(Memory)
            .where(others, _AT > _PLACE)
            .order_by(Memory.event_time.desc(), Memory.id.desc())
            .limit(1),
            here,
        ).first()
        if pred is not None:
            succ = self.session.get(Memory, pred.next_id) if pred.next_id is not None else None
        else:
            succ = self.session.scalars(
                select(Memory)
                .where(others, _AT < _PLACE)
                .order_by(Memory.event_time, Memory.id)
                .limit(1),
                here,
            ).first()
        memory.prev_id = pred.id if pred is not None else None
        memory.next_id = succ.id if succ is not None else None
        if pred is not None:
            self.touch(pred)
            pred.next_id = mid
        if succ is not None:
            self.touch(succ)
            succ.prev_id = mid

    def link_all_into_timeline(self, memories: Sequence[Memory]) -> None:
        """Place flushed new memories of this namespace into its timeline at once.

        The same links as placing them one by one (`link_into_timeline`), in a query per
        memory and one per run rather than ORM loads and a flush each. In (event_time, id)
        order, the new memories fall into runs that no stored memory separates: a memory's
        nearest predecessor is either the previous new one (same run) or a stored memory (the
        run's predecessor); the run's successor is the nearest memory after its last one, which
        is stored (or none). Each run is chained and spliced between the two.
        """
        if not memories:
            return
        batch = sorted(memories, key=lambda m: (m.event_time, m.id))
        new = {m.id for m in batch}
        runs: list[tuple[int | None, list[Memory]]] = []  # (stored predecessor, the run)
        with self.session.no_autoflush:
            for memory in batch:
                pred = self._nearest(memory, before=True)
                if pred is not None and pred in new:
                    runs[-1][1].append(memory)
                else:
                    runs.append((pred, [memory]))
            ends = [(pred, run, self._nearest(run[-1], before=False)) for pred, run in runs]
            stored = {i for pred, _, succ in ends for i in (pred, succ) if i is not None}
            rows = {
                row.id: row
                for ids in chunks(stored)
                for row in self.session.scalars(select(Memory).where(Memory.id.in_(ids)))
            }
        for pred, run, succ in ends:
            for left, right in pairwise(run):
                left.next_id, right.prev_id = right.id, left.id
            run[0].prev_id, run[-1].next_id = pred, succ
            if pred is not None:
                self.touch(rows[pred])
                rows[pred].next_id = run[0].id
            if succ is not None:
                self.touch(rows[succ])
                rows[succ].prev_id = run[-1].id

    def _nearest(self, memory: Memory, *, before: bool) -> int | None:
        """Return the id of the active memory nearest before (or after) ``memory`` on the
        namespace's timeline, new memories of this transaction included (they are flushed)."""
        place = {"namespace": self.namespace, "event_time": memory.event_time, "id": memory.id}
        query = _NEAREST_BEFORE if before else _NEAREST_AFTER
        found: int | None = self.session.connection().execute(query, place).scalar()
        return found

    def splice_out(self, memory: Memory, *, record_self: bool = True) -> None:
        """Take a memory out of the timeline, joining its neighbours.

        ``record_self=False`` records only the neighbours' changes (a forgotten memory leaves no
        image of itself).
        """
        prev = self.session.get(Memory, memory.prev_id) if memory.prev_id else None
        nxt = self.session.get(Memory, memory.next_id) if memory.next_id else None
        if record_self:
            self.touch(memory)
        if prev is not None:
            self.touch(prev)
            prev.next_id = nxt.id if nxt is not None else None
        if nxt is not None:
            self.touch(nxt)
            nxt.prev_id = prev.id if prev is not None else None
        memory.prev_id = memory.next_id = None
        self.session.flush()

    # -- finishing -------------------------------------------------------------------------------

    def finish(self) -> bool:
        """Write operations, version bumps, outbox rows and the revision; return whether the
        record stays (a unit that changed nothing and has no other reason drops it)."""
        self.session.flush()
        operations: list[MaintenanceOperation] = []
        for key in self._order:
            tracked = self._tracked[key]
            if isinstance(tracked.row, Memory):
                if tracked.deleted:
                    self._queue(tracked.row, action="delete")
                else:
                    self._settle_memory(tracked.row, tracked.before)
                if _rewrites(tracked, restoring=self.restoring):
                    self._rewrote = True
            after = None if tracked.deleted else _image(tracked.row)
            if tracked.before == after:
                continue  # unchanged, or made and removed again in this unit (a cascade's undo)
            before = tombstone(tracked.before, key[1]) if tracked.erase else tracked.before
            operations.append(
                MaintenanceOperation(
                    record_id=self.record.id,
                    seq=len(operations),
                    op=_op_name(tracked),
                    target_kind=tracked.kind,
                    target_id=key[1],
                    before=before,
                    after=after,
                )
            )
        self.session.add_all(operations)
        if operations or self._rewrote:
            state = self._state if self._state is not None else self.lock_namespace()
            state.revision += 1
            state.rewritten += int(self._rewrote)
            state.updated_at = self.now
        self.session.flush()
        self.operations = len(operations)
        if not operations and not self._keep:
            self.session.delete(self.record)
            self.kept = False
            return False
        # What the record holds, counted where it is written (a plan's operations may turn into
        # more rows, such as timeline neighbours, or none, such as a relation that exists).
        self.record.stats = {**(self.record.stats or {}), "operations": len(operations)}
        return True

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


# What a tombstone keeps of a row: its identity and shape, never its text.
_TOMBSTONE_FIELDS = (
    "namespace",
    "type",
    "status",
    "version",
    "replaced_by_id",
    "content_hash",
    "source_id",
    "target_id",
    "strength",
)


def tombstone(image: Mapping[str, Any] | None, target_id: int) -> dict[str, Any] | None:
    """What an image of an erased row keeps: that it existed, its ids and its content hash."""
    if image is None:
        return None
    kept: dict[str, Any] = {"id": target_id, "forgotten": True}
    kept.update({name: image[name] for name in _TOMBSTONE_FIELDS if name in image})
    if "content_hash" not in kept and isinstance(image.get("content"), str):  # a log line's
        kept["content_hash"] = content_hash(image["content"])
    return kept


# What the lexical index holds of a memory besides its id and version.
_INDEXED_FIELDS = ("content", "event_time", "session_id", "type", "tags", "metadata")


def _rewrites(tracked: _Tracked, *, restoring: bool) -> bool:
    """Tell whether a memory's change is one an index that follows new ids would miss: a field
    it holds changed, the memory went, became active again, or came back with its old id."""
    before = tracked.before
    if before is None:
        return restoring  # an undo puts a deleted row back under its old id
    if tracked.deleted:
        return True
    after = _image(tracked.row)
    active = MemoryStatus.ACTIVE.value
    if after["status"] == active and before["status"] != active:
        return True
    return any(before[name] != after[name] for name in _INDEXED_FIELDS)


def _image(row: Row) -> dict[str, Any]:
    if isinstance(row, ConversationLog):
        return log_image(row)
    return memory_image(row) if isinstance(row, Memory) else relation_image(row)


def _kind(row: Row) -> str:
    if isinstance(row, ConversationLog):
        return "log"
    return "memory" if isinstance(row, Memory) else "relation"


def _op_name(tracked: _Tracked) -> str:
    if tracked.deleted:
        return f"delete_{tracked.kind}"
    return f"{'create' if tracked.before is None else 'update'}_{tracked.kind}"
