"""Maintenance records: undoing one, as a record of its own.

An undo walks the record's operations in reverse and writes the fields they changed back in
one transaction, through a restoring unit of work (``Writer.unit(..., restoring=True)``); a
later change to other fields of the same rows stays, and derived state (the timeline, versions,
the vector index through the outbox) is recomputed (store.write.undo_restore). The undo record
names what it undid (``undoes_id``); the undone record points back (``undone_by_id``) and gets
status "undone". Undoing an undo puts the original back in force, so it may be undone again.

An undo that later records depend on (they changed the same fields, or built on what the
record created) is refused and names them (store.write.undo_dependents). ``cascade=True``
undoes them too, newest first and then the record, in the same transaction and as one undo
record (stats "cascade" lists them); undoing that record puts them all back in force.

Recall statistics (access_count, last_accessed, base_importance) are neither compared nor
restored on rows that still exist: a recall after a record is not a change to what it did, and
undo must not forget that the memory was recalled. What a record itself added to them (an
exact duplicate's recalls carried to its keeper) is taken back, recalls made since staying. A
conversation log line an ingest updated is put back as it was, as a memory is. Conflict checks
live in store.write.undo_conflicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import session_factory
from store.errors import NotFound, StoreError
from store.kinds import RecordStatus
from store.models import MaintenanceOperation, MaintenanceRecord
from store.write.undo_conflicts import (
    Action,
    Conflict,
    UndoStep,
    carried_recalls,
    find_conflicts,
    read_snapshot,
    visible,
)
from store.write.undo_dependents import Dependent, find_dependents
from store.write.undo_restore import Restorer
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
    """Rows changed after the record; nothing was written. ``conflicts`` lists them and
    ``dependents`` the later records that changed them, newest first (the order to undo)."""

    def __init__(
        self,
        record_id: int,
        conflicts: Sequence[Conflict],
        *,
        forced: bool,
        dependents: Sequence[Dependent] = (),
        cascading: bool = False,
        applicable: bool = True,
        cascade: Sequence[int] | None = None,
        cascade_refused: bool = False,
    ) -> None:
        self.record_id = record_id
        self.forced = forced
        self.cascade = tuple(cascade) if cascade is not None else None
        self.cascade_refused = cascade_refused
        self.conflicts = tuple(conflicts)
        self.applicable = applicable  # whether forcing would apply anything
        self.dependents = tuple(dependents)
        self.advice = _advice(self, cascading=cascading)
        shown = "; ".join(conflict.describe() for conflict in self.conflicts[:20])
        message = f"record {record_id} cannot be undone, nothing written: {shown}{self._more}"
        if self.dependents:
            named = "; ".join(d.describe() for d in self.dependents)
            message += f". Later records depend on it: {named}"
        super().__init__(message + "".join(f". {line}" for line in self.advice))

    @property
    def _more(self) -> str:
        extra = len(self.conflicts) - 20
        return f" (and {extra} more)" if extra > 0 else ""

    def lines(self) -> list[str]:
        """The refusal for a terminal: what conflicts, the records behind it, what to do."""
        lines = [f"record {self.record_id} cannot be undone, nothing written; it conflicts with:"]
        lines += [f"  {conflict.describe()}" for conflict in self.conflicts[:20]]
        lines += [f"  {self._more.strip()}"] if self._more else []
        if self.dependents:
            lines.append("later records depend on it, newest first:")
            lines += [f"  {dependent.describe()}" for dependent in self.dependents]
        return lines + self.advice


def _advice(refusal: UndoConflict, *, cascading: bool) -> list[str]:
    """What the operator can do about a refused undo, a sentence or two."""
    record_id, dependents = refusal.record_id, refusal.dependents
    finals = [d for d in dependents if d.final]
    if finals:
        erased = ", ".join(f"#{d.record_id} ({d.job})" for d in finals)
        said = (
            f"{erased} erased what it changed, and an erasure cannot be undone, so neither can"
            " this record as a whole"
        )
    elif dependents and not cascading and refusal.cascade_refused:
        said = (
            "Undoing them first would not be enough: even --cascade is refused"
            f" (`secretary undo {record_id} --cascade --dry-run` says why)"
        )
    elif dependents and not cascading:
        # The cascade's order where it is known: undoing a redo takes back what it redid, and
        # what is undone first may uncover another record, so the records that block an undo
        # now are not always the ones to undo.
        ids = refusal.cascade or [d.record_id for d in dependents]
        order = ", then ".join(f"#{rid}" for rid in ids)
        said = (
            f"First undo {order}, or undo this record with --cascade to take"
            f" {'it' if len(ids) == 1 else 'them'} back with it in one step"
        )
    elif cascading:
        said = "No later record in force explains it, so --cascade cannot help"
    else:
        said = ""
    if refusal.forced or not refusal.applicable:
        force = "Even forcing (--force) has nothing to apply: every part conflicts"
    elif cascading:
        force = "Adding --force skips those parts and undoes the rest"
    else:
        force = "Forcing it (--force) applies only the parts that do not conflict"
    return [line for line in (said, force) if line]


# -- the plan and the result -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UndoPlan:
    record_id: int
    namespace: str
    job: str
    steps: tuple[UndoStep, ...]  # in reverse operation order
    conflicts: tuple[Conflict, ...]
    dependents: tuple[Dependent, ...] = ()  # later records that cause the conflicts

    @property
    def applicable(self) -> tuple[UndoStep, ...]:
        blocked = {(c.kind, c.target_id) for c in self.conflicts}
        return tuple(step for step in self.steps if step.key not in blocked)


@dataclass(frozen=True, kw_only=True)
class CascadePlan:
    """Undoing a record with the later records that depend on it: ``parts`` newest first, the
    record itself last (unless undoing a later redo of it already took it back); each part
    planned on the store as the parts before it leave it."""

    record_id: int
    namespace: str
    parts: tuple[UndoPlan, ...]

    @property
    def cascaded(self) -> tuple[int, ...]:
        return tuple(part.record_id for part in self.parts if part.record_id != self.record_id)


@dataclass(frozen=True, kw_only=True)
class UndoResult:
    record_id: int  # the undo record
    undone_id: int
    restored: int
    skipped: tuple[Conflict, ...]
    cascaded: tuple[int, ...] = ()  # later records undone with it, newest first


def steps_of(operations: Iterable[MaintenanceOperation]) -> tuple[UndoStep, ...]:
    """Return the steps that undo ``operations``, last operation first.

    Operations that changed only derived state (a timeline relink, say) or recall statistics
    have nothing to undo and give no step.
    """
    steps: list[UndoStep] = []
    for op in sorted(operations, key=lambda o: o.seq, reverse=True):
        if op.before is None:
            action: Action = "delete"
        elif op.after is None:
            action = "recreate"
        elif (
            visible(op.before) == visible(op.after)
            and not op.after.get("forgotten")
            and not carried_recalls(op.before, op.after)
        ):
            continue  # only derived state or recall statistics changed: nothing to undo
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
    if not steps and record.undoes_id is None:  # an undo that wrote nothing still flips
        raise NothingToUndo(record_id, record.status)
    conflicts = find_conflicts(steps, read_snapshot(session, record.namespace, steps))
    plan = UndoPlan(
        record_id=record_id,
        namespace=record.namespace,
        job=record.job,
        steps=steps,
        conflicts=conflicts,
        dependents=find_dependents(session, record, conflicts) if conflicts else (),
    )
    return record, plan


def plan_undo(writer: Writer, record_id: int) -> UndoPlan:
    """Return what undoing the record would restore, and what conflicts; write nothing."""
    with session_factory(writer.engine)() as session:
        return _load(session, record_id)[1]


def plan_cascade(
    writer: Writer, record_id: int, *, now: datetime, force: bool = False
) -> CascadePlan:
    """Return the undo of the record with every later record it needs undone first.

    The parts are tried in a transaction that is rolled back, so each is planned on the store
    the newer ones leave; nothing is written. Raise UndoConflict if a conflict has no later
    record in force to undo, or one of them is an erasure, unless ``force``: then those parts
    are skipped, as a forced undo skips them.
    """
    plan = plan_undo(writer, record_id)
    if not plan.conflicts:
        return CascadePlan(record_id=record_id, namespace=plan.namespace, parts=(plan,))
    chosen, forcing = {record_id}, False
    while True:
        try:
            with writer.unit(plan.namespace, "undo", now, restoring=True) as unit:
                raise _Tried(_undo_parts(unit, sorted(chosen, reverse=True), force=forcing))
        except _Tried as tried:
            return CascadePlan(record_id=record_id, namespace=plan.namespace, parts=tried.parts)
        except UndoConflict as blocked:
            more = {d.record_id for d in blocked.dependents if not d.final} - chosen
            if more:
                chosen |= more
            elif force and not forcing:
                forcing = True  # what no later record explains, or an erasure, is skipped
            else:
                raise UndoConflict(
                    blocked.record_id,
                    blocked.conflicts,
                    forced=forcing,
                    dependents=blocked.dependents,
                    cascading=True,
                    applicable=blocked.applicable,
                ) from None


def cascade_order(
    writer: Writer, record_id: int, *, now: datetime, force: bool = False
) -> tuple[int, ...] | None:
    """Return the later records a cascade would undo with the record, newest first (the order
    to undo them in by hand too), or None if the cascade would be refused."""
    try:
        return plan_cascade(writer, record_id, now=now, force=force).cascaded
    except UndoConflict:
        return None


class _Tried(Exception):
    """Rolls a trial of the cascade back, carrying what it planned."""

    def __init__(self, parts: tuple[UndoPlan, ...]) -> None:
        self.parts = parts


# -- applying ----------------------------------------------------------------------------------


def undo(
    writer: Writer,
    record_id: int,
    *,
    now: datetime,
    force: bool = False,
    cascade: bool = False,
) -> UndoResult:
    """Undo a record in one transaction, as a record of job "undo"; return that record.

    Raise UndoConflict (writing nothing) if later changes conflict, naming the later records
    that made them. With ``cascade`` those later records are undone too, newest first, in the
    same transaction and record. With ``force`` the parts that still conflict (with a cascade:
    those no later record in force explains, or an erasure made final) are skipped and the
    undo record's stats list them.
    """
    with session_factory(writer.engine)() as session:
        record = session.get(MaintenanceRecord, record_id)
        if record is None:
            raise NotFound("record", record_id)
        namespace = record.namespace
    order: tuple[int, ...] = (record_id,)
    if cascade:
        cascaded = plan_cascade(writer, record_id, now=now, force=force)
        order = tuple(part.record_id for part in cascaded.parts)
    try:
        return _apply_undo(writer, namespace, record_id, order, now=now, force=force)
    except UndoConflict as exc:
        if cascade or not exc.dependents or any(d.final for d in exc.dependents):
            raise
        later = cascade_order(writer, record_id, now=now, force=force)
        raise UndoConflict(
            exc.record_id,
            exc.conflicts,
            forced=exc.forced,
            dependents=exc.dependents,
            applicable=exc.applicable,
            cascade=later,
            cascade_refused=later is None,
        ) from None


def _apply_undo(
    writer: Writer,
    namespace: str,
    record_id: int,
    order: tuple[int, ...],
    *,
    now: datetime,
    force: bool,
) -> UndoResult:
    with writer.unit(namespace, "undo", now, restoring=True) as unit:
        # Planned again inside the transaction, under the namespace lock: nothing can change
        # between the conflict check and the writes.
        session = unit.session
        previous = {str(rid): _record(session, rid).status for rid in {*order, record_id}}
        undo_record = unit.record
        unit.keep()  # the undone records point at it, even if every row was as it should be
        parts = _undo_parts(unit, order, force=force)
        undo_record.undoes_id = record_id
        skipped = [c for part in parts for c in part.conflicts]
        restored = sum(len(part.applicable) for part in parts)
        undo_record.stats = {
            "undoes": record_id,
            "previous_status": previous[str(record_id)],
            "restored": restored,
            "skipped": [conflict.as_json() for conflict in skipped],
        }
        undone = tuple(part.record_id for part in parts if part.record_id != record_id)
        if undone:
            undo_record.stats |= {
                "cascade": list(undone),
                "previous_statuses": {rid: previous[rid] for rid in map(str, undone)}
                | {str(record_id): previous[str(record_id)]},
            }
        session.flush()
    return UndoResult(
        record_id=undo_record.id,
        undone_id=record_id,
        restored=restored,
        skipped=tuple(skipped),
        cascaded=undone,
    )


def _record(session: Session, record_id: int) -> MaintenanceRecord:
    record = session.get(MaintenanceRecord, record_id)
    if record is None:
        raise NotFound("record", record_id)
    return record


def _undo_parts(unit: UnitOfWork, order: Sequence[int], *, force: bool) -> tuple[UndoPlan, ...]:
    """Undo the records in ``order`` one after the other in the unit, each marked undone by the
    unit's record as it goes; return their plans.

    Undoing an undo puts what it undid back in force: a record of ``order`` that this leaves
    undone already (a redo and the record it redid, say) has nothing left to undo and is
    passed over.
    """
    session = unit.session
    parts: list[UndoPlan] = []
    for position, record_id in enumerate(order):
        record = _record(session, record_id)
        if position > 0 and record.undone_by_id is not None:
            continue
        _, plan = _load(session, record_id)
        if plan.conflicts and not force:
            raise UndoConflict(
                record_id,
                plan.conflicts,
                forced=False,
                dependents=plan.dependents,
                applicable=bool(plan.applicable),
            )
        if plan.steps and not plan.applicable:
            raise UndoConflict(record_id, plan.conflicts, forced=True, dependents=plan.dependents)
        Restorer(unit).run(plan.applicable)
        session.flush()
        _set_undone(session, record, by=unit.record)
        session.flush()
        parts.append(plan)
    return tuple(parts)


# -- in force or undone ------------------------------------------------------------------------


def _targets(session: Session, undo_record: MaintenanceRecord) -> list[MaintenanceRecord]:
    """The records an undo record took back, in the order it undid them: those it cascaded to
    (newest first), then the one it names."""
    if undo_record.undoes_id is None:
        return []
    ids = [*(undo_record.stats or {}).get("cascade", []), undo_record.undoes_id]
    # Records are never deleted; a missing one leaves nothing to flip.
    return [r for r in (session.get(MaintenanceRecord, i) for i in ids) if r is not None]


def _set_undone(session: Session, record: MaintenanceRecord, *, by: MaintenanceRecord) -> None:
    """Mark ``record`` undone by ``by``; if it was itself an undo, what it took back is in force
    again (and so on down a chain of undos of undos: each level flips). Its targets come back
    in the reverse of the order it undid them, so a redo among them settles last."""
    record.status = RecordStatus.UNDONE.value
    record.undone_by_id = by.id
    for target in reversed(_targets(session, record)):
        _set_in_force(session, target, undoer=record)


def _set_in_force(
    session: Session, record: MaintenanceRecord, *, undoer: MaintenanceRecord
) -> None:
    """Mark ``record`` in force again; if it is an undo, its targets are undone by it again,
    in the order it undid them."""
    stats = undoer.stats or {}
    status = stats.get("previous_statuses", {}).get(str(record.id))
    record.status = str(status or stats.get("previous_status", RecordStatus.APPLIED.value))
    record.undone_by_id = None
    for target in _targets(session, record):
        _set_undone(session, target, by=record)
