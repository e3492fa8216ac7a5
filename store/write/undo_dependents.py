"""The later records an undo depends on: who changed the rows that block it, and how.

Each conflict names its blocking row (store.write.undo_conflicts); a later record in force
whose operation changed that row (its blocking fields, or created or removed it) depends on
what is undone. Undo names them, newest first, which is the order to undo them in; a forget
or a retention purge erased what it changed and cannot be undone, so it is named as final.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import chunks
from store.models import MaintenanceOperation, MaintenanceRecord
from store.write.undo_conflicts import ERASED, Conflict, Key, visible

# Jobs whose records keep no content of what they removed: nothing can undo them.
FINAL_JOBS = frozenset({"forget", "retention"})


@dataclass(frozen=True, kw_only=True)
class Dependent:
    """A later record in force that changed what an undo would restore."""

    record_id: int
    job: str
    at: datetime
    what: tuple[str, ...]  # what it did to the blocking rows, in words

    @property
    def final(self) -> bool:
        return self.job in FINAL_JOBS

    def describe(self) -> str:
        more = f"; and {len(self.what) - 3} more" if len(self.what) > 3 else ""
        done = "; ".join(self.what[:3]) + more
        final = ", which cannot be undone" if self.final else ""
        return f"#{self.record_id} {self.job} ({self.at:%Y-%m-%d %H:%M:%S}{final}): {done}"


def find_dependents(
    session: Session, record: MaintenanceRecord, conflicts: Sequence[Conflict]
) -> tuple[Dependent, ...]:
    """Return the later records in force whose changes cause ``conflicts``, newest first."""
    by_row: dict[Key, list[Conflict]] = {}
    for conflict in conflicts:
        if conflict.blocker is not None:
            by_row.setdefault(conflict.blocker, []).append(conflict)
    found: dict[int, tuple[MaintenanceRecord, list[str]]] = {}
    explained: set[Key | None] = set()
    for kind in sorted({kind for kind, _ in by_row}):
        ids = [row for k, row in by_row if k == kind]
        for chunk in chunks(ids):
            rows = session.execute(
                select(MaintenanceOperation, MaintenanceRecord)
                .join(MaintenanceRecord, MaintenanceRecord.id == MaintenanceOperation.record_id)
                .where(
                    MaintenanceRecord.namespace == record.namespace,
                    MaintenanceRecord.id > record.id,
                    MaintenanceRecord.undone_by_id.is_(None),
                    MaintenanceOperation.target_kind == kind,
                    MaintenanceOperation.target_id.in_(chunk),
                )
                .order_by(MaintenanceOperation.record_id, MaintenanceOperation.seq)
            )
            for op, later in rows:
                if _redoes(session, later, record.id):
                    continue  # it put this record's own changes back: no change of its own
                for conflict in by_row[(kind, op.target_id)]:
                    if _changes(op, conflict.blocking_fields):
                        explained.add(conflict.blocker)
                        _, what = found.setdefault(later.id, (later, []))
                        line = _what(op, conflict)
                        if line not in what:
                            what.append(line)
    unexplained = [c for c in conflicts if c.reason == ERASED and c.blocker not in explained]
    for later, what in _erasures(session, record, unexplained):
        found.setdefault(later.id, (later, []))[1].extend(what)
    return tuple(
        Dependent(record_id=rid, job=later.job, at=_at(later), what=tuple(what))
        for rid, (later, what) in sorted(found.items(), reverse=True)
    )


def _erasures(
    session: Session, record: MaintenanceRecord, conflicts: Sequence[Conflict]
) -> list[tuple[MaintenanceRecord, list[str]]]:
    """The later forgets that erased the rows of ``conflicts``: a forget keeps no operation on
    what it erased, only its ids in its stats."""
    wanted = {(c.kind, c.target_id) for c in conflicts}
    if not wanted:
        return []
    forgets = session.scalars(
        select(MaintenanceRecord).where(
            MaintenanceRecord.namespace == record.namespace,
            MaintenanceRecord.id > record.id,
            MaintenanceRecord.job == "forget",
        )
    )
    found = []
    for forget in forgets:
        stats = forget.stats or {}
        erased = {("memory", m.get("id")) for m in stats.get("memories", [])}
        erased |= {("relation", i) for i in stats.get("relations", [])}
        erased |= {("log", i) for i in stats.get("logs", [])}
        hits = sorted(wanted & erased)
        if hits:
            found.append((forget, [f"erased {kind} {row}" for kind, row in hits]))
    return found


def _redoes(session: Session, later: MaintenanceRecord, record_id: int) -> bool:
    """Tell whether ``later`` is a redo of the record: an undo of an undo of it (or of a redo
    of it, and so on down the chain)."""
    current: MaintenanceRecord | None = later
    while current is not None and current.undoes_id is not None:
        undone = session.get(MaintenanceRecord, current.undoes_id)
        if undone is None or undone.undoes_id is None:
            return False
        if undone.undoes_id == record_id:
            return True
        current = session.get(MaintenanceRecord, undone.undoes_id)
    return False


def _at(record: MaintenanceRecord) -> datetime:
    return record.finished_at or record.started_at


def _changes(op: MaintenanceOperation, fields: Sequence[str]) -> bool:
    """Tell whether ``op`` created or removed its row, or changed one of ``fields`` (any field
    a person sees when none are named)."""
    if _tombstone(op.before) and _tombstone(op.after):
        return False  # an image an erasure rewrote: the erasure is the record to name
    if op.before is None or op.after is None:
        return True
    before, after = visible(op.before), visible(op.after)
    names = fields or sorted(before.keys() | after.keys())
    return any(before.get(name) != after.get(name) for name in names)  # "id": never


def _tombstone(image: dict[str, Any] | None) -> bool:
    return image is not None and bool(image.get("forgotten"))


def _what(op: MaintenanceOperation, conflict: Conflict) -> str:
    assert conflict.blocker is not None
    kind, row = conflict.blocker
    if _tombstone(op.before) or _tombstone(op.after):
        done = f"erased {kind} {row}"
    elif op.before is None:
        done = f"created {kind} {row}"
    elif op.after is None:
        done = f"removed {kind} {row}"
    else:
        before, after = visible(op.before), visible(op.after)
        names = conflict.blocking_fields or sorted(before.keys() | after.keys())
        changed = [name for name in names if before.get(name) != after.get(name)]
        done = f"changed {', '.join(changed)} of {kind} {row}"
    if (conflict.kind, conflict.target_id) != conflict.blocker:
        done += f" ({conflict.kind} {conflict.target_id}: {conflict.reason})"
    return done
