"""Maintenance records: reading them, and undoing one as a record of its own.

An undo walks the record's operations in reverse and writes every before image back in one
transaction, through a restoring ChangeSet: versions are restored rather than bumped, and the
vector index follows through the outbox. The undo record names what it undid (``undoes_id``);
the undone record points back (``undone_by_id``) and gets status "undone". Undoing an undo puts
the original back in force, so the original may be undone again later.

Recall statistics (access_count, last_accessed, base_importance) are neither compared nor
restored on rows that still exist: a recall after a record is not a change to what it did, and
undo must not forget that the memory was recalled.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from store.changeset import ChangeSet
from store.errors import NotFound, StoreError
from store.images import memory_image, memory_values, relation_image, relation_values
from store.models import (
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    RecordStatus,
)
from store.repository import Repository

Image = dict[str, Any]
Key = tuple[str, int]  # ("memory" | "relation", id)
Action = Literal["delete", "restore", "recreate"]

RECALL_FIELDS = frozenset({"access_count", "last_accessed", "base_importance"})
LINK_FIELDS = ("prev_id", "next_id", "replaced_by_id")
_CHUNK = 500  # ids per IN (...) clause


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


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FieldDiff:
    field: str
    expected: Any
    current: Any


@dataclass(frozen=True, kw_only=True)
class Conflict:
    """Why one row of the record cannot be restored."""

    kind: str
    target_id: int
    reason: str
    fields: tuple[FieldDiff, ...] = ()

    def describe(self) -> str:
        diffs = ", ".join(
            f"{d.field} (expected {_short(d.expected)}, now {_short(d.current)})"
            for d in self.fields
        )
        return f"{self.kind} {self.target_id}: {self.reason}" + (f": {diffs}" if diffs else "")

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.target_id,
            "reason": self.reason,
            "fields": [
                {"field": d.field, "expected": d.expected, "current": d.current}
                for d in self.fields
            ],
        }


@dataclass(frozen=True, kw_only=True)
class UndoStep:
    """Put one row back: delete what the record created, restore or recreate the rest."""

    seq: int
    kind: str
    target_id: int
    action: Action
    image: Image | None  # the before image to write back (None: delete the row)
    expected: Image | None  # the record's after image: what must be there now

    @property
    def key(self) -> Key:
        return (self.kind, self.target_id)

    def changed_fields(self) -> list[str]:
        before, after = _strip(self.image or {}), _strip(self.expected or {})
        return sorted(
            name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
        )

    def describe(self) -> str:
        what = f"{self.action} {self.kind} {self.target_id}"
        return f"{what}: {', '.join(self.changed_fields())}" if self.action == "restore" else what


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


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _strip(image: Mapping[str, Any]) -> Image:
    return {name: value for name, value in image.items() if name not in RECALL_FIELDS}


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
        elif _strip(op.before) == _strip(op.after):
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


# -- conflicts (pure) --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What the database holds now, as far as an undo plan needs to know."""

    memories: Mapping[int, Image]  # the steps' memories and every memory their images name
    relations: Mapping[int, Image]
    # memory id -> rows that refer to it now, as (kind, row id, column)
    referrers: Mapping[int, tuple[tuple[str, int, str], ...]]
    external_ids: Mapping[str, int]  # external id -> the memory that holds it now
    edges: Mapping[tuple[int, int, str], int]  # (source, target, type) -> relation id

    def current(self, key: Key) -> Image | None:
        return (self.memories if key[0] == "memory" else self.relations).get(key[1])


def _direct_conflict(step: UndoStep, current: Image | None) -> Conflict | None:
    """Compare the row as it is now with the record's after image (recall statistics aside)."""
    if step.expected is None:
        if current is None:
            return None
        return Conflict(kind=step.kind, target_id=step.target_id, reason="exists again")
    if current is None:
        return Conflict(kind=step.kind, target_id=step.target_id, reason="deleted since")
    expected, now = _strip(step.expected), _strip(current)
    diffs = tuple(
        FieldDiff(field=name, expected=expected.get(name), current=now.get(name))
        for name in sorted(expected.keys() | now.keys())
        if expected.get(name) != now.get(name)
    )
    if not diffs:
        return None
    return Conflict(kind=step.kind, target_id=step.target_id, reason="changed since", fields=diffs)


def _references(step: UndoStep) -> list[tuple[str, int]]:
    """Return (column, memory id) for every memory the step's restored image points at."""
    image = step.image or {}
    fields = LINK_FIELDS if step.kind == "memory" else ("source_id", "target_id")
    return [(name, image[name]) for name in fields if image.get(name) is not None]


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    """Which memories and relations exist once the applied steps are done."""

    applied: Sequence[UndoStep]
    snap: Snapshot

    def ids(self, kind: str, action: Action) -> set[int]:
        return {s.target_id for s in self.applied if s.kind == kind and s.action == action}

    def exists(self, memory_id: int) -> bool:
        if memory_id in self.ids("memory", "recreate"):
            return True
        return memory_id in self.snap.memories and memory_id not in self.ids("memory", "delete")


def _dangling(outcome: _Outcome) -> Iterator[Conflict]:
    """Restored images that would point at a memory that would not exist."""
    for s in outcome.applied:
        missing = [f"{name} -> {mid}" for name, mid in _references(s) if not outcome.exists(mid)]
        if s.action != "delete" and missing:
            reason = f"would point at memories that would not exist ({', '.join(missing)})"
            yield Conflict(kind=s.kind, target_id=s.target_id, reason=reason)


def _still_referred(outcome: _Outcome) -> Iterator[Conflict]:
    """Memories to delete that rows left in place still refer to (the delete would cascade)."""
    gone = {
        "memory": outcome.ids("memory", "delete"),
        "relation": outcome.ids("relation", "delete"),
    }
    restored = {s.key: s.image or {} for s in outcome.applied if s.action != "delete"}
    for mid in sorted(gone["memory"]):
        for kind, row_id, column in outcome.snap.referrers.get(mid, ()):
            image = restored.get((kind, row_id))
            if row_id in gone[kind] or (image is not None and image.get(column) != mid):
                continue
            reason = f"{kind} {row_id} still refers to it ({column})"
            yield Conflict(kind="memory", target_id=mid, reason=reason)


def _duplicates(outcome: _Outcome) -> Iterator[Conflict]:
    """Recreated rows whose unique key another row holds now."""
    gone = {
        "memory": outcome.ids("memory", "delete"),
        "relation": outcome.ids("relation", "delete"),
    }
    for s in outcome.applied:
        holder = _unique_holder(s, outcome.snap)
        if holder is not None and holder not in gone[s.kind]:
            reason = f"its unique key is taken by {s.kind} {holder}"
            yield Conflict(kind=s.kind, target_id=s.target_id, reason=reason)


def _linked_to_skipped(applied: Sequence[UndoStep], skipped: set[int]) -> Iterator[Conflict]:
    """Steps that would move a link to or from a memory whose own step is skipped.

    Left alone, the skipped memory and its neighbours stay linked to each other, so the
    timeline remains a consistent chain even under ``force``.
    """
    for s in applied:
        if s.action == "delete" or s.kind != "memory":
            continue
        image, expected = s.image or {}, s.expected or {}
        for name in LINK_FIELDS:
            was, now = image.get(name), expected.get(name)
            blocked = [mid for mid in (was, now) if was != now and mid in skipped]
            if blocked:
                reason = f"its {name} links to memory {blocked[0]}, whose undo is skipped"
                yield Conflict(kind=s.kind, target_id=s.target_id, reason=reason)
                break


def _dependency_conflicts(
    steps: Sequence[UndoStep], found: Mapping[Key, Conflict], snap: Snapshot
) -> dict[Key, Conflict]:
    """Given the conflicts so far, find steps that the skipped ones would break."""
    applied = [step for step in steps if step.key not in found]
    outcome = _Outcome(applied=applied, snap=snap)
    skipped = {mid for kind, mid in found if kind == "memory"}
    more: dict[Key, Conflict] = {}
    for check in (
        _dangling(outcome),
        _still_referred(outcome),
        _duplicates(outcome),
        _linked_to_skipped(applied, skipped),
    ):
        for conflict in check:
            more.setdefault((conflict.kind, conflict.target_id), conflict)
    return more


def _unique_holder(step: UndoStep, snap: Snapshot) -> int | None:
    """Return the row that now holds the unique key a recreated row needs, if another does."""
    if step.action != "recreate" or step.image is None:
        return None
    image = step.image
    if step.kind == "memory":
        holder = snap.external_ids.get(image["external_id"]) if image["external_id"] else None
    else:
        holder = snap.edges.get((image["source_id"], image["target_id"], image["type"]))
    return holder if holder != step.target_id else None


def find_conflicts(steps: Sequence[UndoStep], snap: Snapshot) -> tuple[Conflict, ...]:
    """Return the conflicts of ``steps`` in step order.

    A step conflicts when its row changed since the record, or when applying it alongside the
    other non-conflicting steps would leave a dangling link or a duplicate key; skipping a
    step can block others, so this repeats until nothing new is found.
    """
    found: dict[Key, Conflict] = {}
    for step in steps:
        conflict = _direct_conflict(step, snap.current(step.key))
        if conflict is not None:
            found[step.key] = conflict
    while True:
        more = {
            k: c for k, c in _dependency_conflicts(steps, found, snap).items() if k not in found
        }
        if not more:
            break
        found.update(more)
    return tuple(found[step.key] for step in steps if step.key in found)


# -- reading the database ----------------------------------------------------------------------


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    ordered = sorted(set(ids))
    for start in range(0, len(ordered), _CHUNK):
        yield ordered[start : start + _CHUNK]


def _memory_ids(steps: Sequence[UndoStep]) -> set[int]:
    ids = {s.target_id for s in steps if s.kind == "memory"}
    for step in steps:
        ids.update(mid for _, mid in _references(step))
    return ids


def _snapshot(session: Session, namespace: str, steps: Sequence[UndoStep]) -> Snapshot:
    memories: dict[int, Image] = {}
    for chunk in _chunks(_memory_ids(steps)):
        memories.update(
            {
                m.id: memory_image(m)
                for m in session.scalars(select(Memory).where(Memory.id.in_(chunk)))
            }
        )
    relations: dict[int, Image] = {}
    for chunk in _chunks(s.target_id for s in steps if s.kind == "relation"):
        rows = session.scalars(select(MemoryRelation).where(MemoryRelation.id.in_(chunk)))
        relations.update({r.id: relation_image(r) for r in rows})
    deleted = [s.target_id for s in steps if s.kind == "memory" and s.action == "delete"]
    recreated = [s.image for s in steps if s.action == "recreate" and s.image is not None]
    return Snapshot(
        memories=memories,
        relations=relations,
        referrers=_referrers(session, deleted),
        external_ids=_external_ids(
            session, namespace, [i["external_id"] for i in recreated if i.get("external_id")]
        ),
        edges=_edges(session, [i for i in recreated if "source_id" in i]),
    )


def _referrers(
    session: Session, memory_ids: Sequence[int]
) -> dict[int, tuple[tuple[str, int, str], ...]]:
    found: dict[int, list[tuple[str, int, str]]] = {}
    for chunk in _chunks(memory_ids):
        links = [getattr(Memory, name) for name in LINK_FIELDS]
        rows = session.execute(
            select(Memory.id, *links).where(or_(*(link.in_(chunk) for link in links)))
        )
        for row_id, *values in rows:
            for name, value in zip(LINK_FIELDS, values, strict=True):
                if value in chunk:
                    found.setdefault(value, []).append(("memory", row_id, name))
        edges = session.execute(
            select(MemoryRelation.id, MemoryRelation.source_id, MemoryRelation.target_id).where(
                or_(MemoryRelation.source_id.in_(chunk), MemoryRelation.target_id.in_(chunk))
            )
        )
        for row_id, source, target in edges:
            for name, value in (("source_id", source), ("target_id", target)):
                if value in chunk:
                    found.setdefault(value, []).append(("relation", row_id, name))
    return {mid: tuple(refs) for mid, refs in found.items()}


def _external_ids(session: Session, namespace: str, external: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for start in range(0, len(external), _CHUNK):
        rows = session.execute(
            select(Memory.external_id, Memory.id).where(
                Memory.namespace == namespace,
                Memory.external_id.in_(external[start : start + _CHUNK]),
            )
        )
        found.update({ext: mid for ext, mid in rows if ext is not None})
    return found


def _edges(session: Session, images: Sequence[Image]) -> dict[tuple[int, int, str], int]:
    wanted = {(i["source_id"], i["target_id"], i["type"]) for i in images}
    found: dict[tuple[int, int, str], int] = {}
    for chunk in _chunks(source for source, _, _ in wanted):
        rows = session.execute(
            select(
                MemoryRelation.source_id,
                MemoryRelation.target_id,
                MemoryRelation.type,
                MemoryRelation.id,
            ).where(MemoryRelation.source_id.in_(chunk))
        )
        found.update({(s, t, ty): rid for s, t, ty, rid in rows if (s, t, ty) in wanted})
    return found


def _load(session: Session, record_id: int) -> tuple[MaintenanceRecord, UndoPlan]:
    """Read the record and plan its undo. Raise NotFound, AlreadyUndone or NothingToUndo."""
    record = session.get(MaintenanceRecord, record_id)
    if record is None:
        raise NotFound("record", record_id)
    if record.undone_by_id is not None:
        raise AlreadyUndone(record_id, record.undone_by_id)
    operations = session.scalars(
        select(MaintenanceOperation).where(MaintenanceOperation.record_id == record_id)
    ).all()
    steps = steps_of(operations)
    if not steps:
        raise NothingToUndo(record_id, record.status)
    conflicts = find_conflicts(steps, _snapshot(session, record.namespace, steps))
    plan = UndoPlan(
        record_id=record_id,
        namespace=record.namespace,
        job=record.job,
        steps=steps,
        conflicts=conflicts,
    )
    return record, plan


def plan_undo(repository: Repository, record_id: int) -> UndoPlan:
    """Return what undoing the record would restore, and what conflicts; write nothing."""
    with repository.reading() as session:
        return _load(session, record_id)[1]


# -- applying ----------------------------------------------------------------------------------


def undo(
    repository: Repository, record_id: int, *, now: datetime, force: bool = False
) -> UndoResult:
    """Undo a record in one transaction, as a record of job "undo"; return that record.

    Raise UndoConflict (writing nothing) if rows changed since the record, unless ``force``:
    then the parts that do not conflict are applied and the undo record's stats list the rest.
    """
    with repository.reading() as session:
        record = session.get(MaintenanceRecord, record_id)
        if record is None:
            raise NotFound("record", record_id)
        namespace = record.namespace
    with repository.changing(namespace, "undo", now, restoring=True) as (session, changes):
        # Planned again inside the transaction, under the namespace lock: nothing can change
        # between the conflict check and the writes.
        record, plan = _load(session, record_id)
        if plan.conflicts and not force:
            raise UndoConflict(record_id, plan.conflicts, forced=False)
        if not plan.applicable:
            raise UndoConflict(record_id, plan.conflicts, forced=True)
        _Restorer(session=session, changes=changes).run(plan.applicable)
        undo_record = changes.record
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


@dataclass
class _Restorer:
    """Writes the steps in an order that every immediate foreign key check accepts."""

    session: Session
    changes: ChangeSet

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
        for name, value in memory_values(step.image or {}).items():
            if name not in RECALL_FIELDS and name != "id":
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


# -- reading records ---------------------------------------------------------------------------


def find_records(
    repository: Repository,
    *,
    namespaces: Sequence[str] | None = None,
    job: str | None = None,
    status: str | None = None,
    limit: int = 50,
) -> list[MaintenanceRecord]:
    """Return records, newest first; ``namespaces=None`` means every namespace."""
    query = select(MaintenanceRecord).order_by(MaintenanceRecord.id.desc()).limit(limit)
    if namespaces is not None:
        query = query.where(MaintenanceRecord.namespace.in_(list(namespaces)))
    if job is not None:
        query = query.where(MaintenanceRecord.job == job)
    if status is not None:
        query = query.where(MaintenanceRecord.status == status)
    with repository.reading() as session:
        return list(session.scalars(query))


def get_record(
    repository: Repository, record_id: int, *, namespaces: Sequence[str] | None = None
) -> tuple[MaintenanceRecord, list[MaintenanceOperation]]:
    """Return a record and its operations in order. Raise NotFound if it is missing or in
    another namespace than ``namespaces`` (so that both look the same).
    """
    record, operations = repository.record(record_id)
    if namespaces is not None and record.namespace not in namespaces:
        raise NotFound("record", record_id)
    return record, operations


def record_json(record: MaintenanceRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "job": record.job,
        "namespace": record.namespace,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "undoes_id": record.undoes_id,
        "undone_by_id": record.undone_by_id,
    }


def record_detail_json(
    record: MaintenanceRecord, operations: Sequence[MaintenanceOperation]
) -> dict[str, Any]:
    return {
        **record_json(record),
        "model": record.model,
        "prompts": list(record.prompts or []),
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cost": record.cost,
        "stats": dict(record.stats or {}),
        "error": record.error,
        "operations": [
            {
                "seq": op.seq,
                "op": op.op,
                "target_kind": op.target_kind,
                "target_id": op.target_id,
                "before": op.before,
                "after": op.after,
            }
            for op in sorted(operations, key=lambda o: o.seq)
        ],
    }
