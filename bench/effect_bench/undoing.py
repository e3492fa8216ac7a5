"""Checks that what the cycles retired can be brought back by undo until retention purges it.

Through the same library calls as `secretary undo` (``store.write.undo.plan_undo`` and ``undo``)
and the namespace export (`secretary export`):

- ``night_round_trip``: undo every record a night's cycle wrote, newest first: the export
  must equal the one taken before the cycle; then undo those undos, newest first: it must
  equal the one taken after the cycle.
- ``restore_retired``: undo one earlier record that retired memories (``--force``: rows that
  later arrivals changed, such as a neighbour's timeline link, are left as they are): each
  memory it retired must be active again with the text it had; undoing that undo must give
  the export back exactly.
- ``roll_back``: on a copy of the store, undo every later record of the namespace, newest
  first, then the record itself: each memory it retired must be active again with its text
  (what "recoverable until retention" asks when the surroundings changed since).
- ``purged_gone``: a record older than the undo window: the memories it retired must be
  absent from the export, and its undo must have nothing that would bring them back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from effect_bench.stores import export_lines
from store.errors import StoreError
from store.kinds import TOMBSTONES
from store.service import Store
from store.views import OperationView, RecordView
from store.write.undo import NothingToUndo, UndoConflict, plan_undo, undo

RETIRED = frozenset(status.value for status in TOMBSTONES)


@dataclass(frozen=True, kw_only=True)
class Retirement:
    """A record that retired memories: when, which, and the text each had before."""

    night: int
    record_id: int
    namespace: str
    retired: Mapping[int, str]  # memory id -> its content before the record


def retirements(
    night: int, record: RecordView, operations: Sequence[OperationView]
) -> Retirement | None:
    """The memories a record retired (active before it, a tombstone after), if any."""
    retired = {
        op.target_id: str(op.before["content"])
        for op in operations
        if op.target_kind == "memory"
        and op.before is not None
        and op.after is not None
        and op.before.get("status") == "active"
        and op.after.get("status") in RETIRED
    }
    if not retired:
        return None
    return Retirement(night=night, record_id=record.id, namespace=record.namespace, retired=retired)


def _diff(a: Mapping[str, list[str]], b: Mapping[str, list[str]]) -> int:
    """How many export lines differ between two exports (either side)."""
    return sum(len(set(a[ns]) ^ set(b.get(ns, []))) for ns in a)


def touched(store: Store, record_id: int) -> tuple[set[int], set[int]]:
    """The memories and relations a record's operations touched."""
    operations = store.db.records.get(record_id)[1]
    memories = {op.target_id for op in operations if op.target_kind == "memory"}
    relations = {op.target_id for op in operations if op.target_kind == "relation"}
    return memories, relations


def without(
    export: Mapping[str, list[str]], memories: set[int], relations: set[int]
) -> dict[str, list[str]]:
    """The export without the lines of these memories and relations (nor relations of these
    memories)."""

    def kept(line: str) -> bool:
        data = json.loads(line)
        if data["kind"] == "memory":
            return int(data["id"]) not in memories
        ends = {data.get("source_id"), data.get("target_id")}
        return int(data["id"]) not in relations and not ends & memories

    return {ns: [line for line in lines if kept(line)] for ns, lines in export.items()}


def night_round_trip(
    store: Store,
    records: Sequence[int],
    before: Mapping[str, list[str]],
    after: Mapping[str, list[str]],
    *,
    now: datetime,
) -> dict[str, Any]:
    """Undo a night's records newest first, compare, undo the undos, compare again.

    A record whose undo is refused (say, a purge whose content was forgotten) stays; what it
    touched is left out of the first comparison.
    """
    writer = store.db.writer
    namespaces = list(before)
    undos: list[int] = []
    refused: dict[str, int] = {}
    kept_memories: set[int] = set()
    kept_relations: set[int] = set()
    for record_id in sorted(records, reverse=True):
        try:
            undos.append(undo(writer, record_id, now=now).record_id)
        except NothingToUndo:
            continue
        except UndoConflict:
            job = store.db.records.get(record_id)[0].job
            refused[job] = refused.get(job, 0) + 1
            memories, relations = touched(store, record_id)
            kept_memories |= memories
            kept_relations |= relations
    undone = without(export_lines(store, namespaces), kept_memories, kept_relations)
    expected = without(before, kept_memories, kept_relations)
    for undo_id in reversed(undos):
        undo(writer, undo_id, now=now)
    redone = export_lines(store, namespaces)
    return {
        "records_undone": len(undos),
        "refused_by_job": refused,
        "undone_equals_before": undone == expected,
        "lines_differing_from_before": _diff(expected, undone),
        "redone_equals_after": redone == after,
        "lines_differing_from_after": _diff(after, redone),
    }


def restore_retired(store: Store, retirement: Retirement, *, now: datetime) -> dict[str, Any]:
    """Undo one record (forced past rows changed since), check, then undo that undo."""
    writer = store.db.writer
    namespace = retirement.namespace
    start = export_lines(store, [namespace])
    plan = plan_undo(writer, retirement.record_id)
    blocked = {
        c.target_id: c.describe()
        for c in plan.conflicts
        if c.kind == "memory" and c.target_id in retirement.retired
    }
    try:
        result = undo(writer, retirement.record_id, now=now, force=True)
    except UndoConflict:  # every part conflicts: even --force writes nothing
        result = None
    views = {m.id: m for m in store.db.memories.many(namespace, retirement.retired)}
    restored = sum(
        1
        for memory_id, content in retirement.retired.items()
        if (view := views.get(memory_id)) is not None
        and view.status == "active"
        and view.content == content
    )
    if result is not None:
        undo(writer, result.record_id, now=now)
    return {
        "record": retirement.record_id,
        "retired": len(retirement.retired),
        "restored": restored,
        "retired_blocked_by_conflicts": len(blocked),
        "blocked_because": sorted(set(blocked.values()))[:5],
        "refused_whole": result is None,
        "other_rows_skipped": len(plan.conflicts) - len(blocked),
        "export_back": export_lines(store, [namespace]) == start,
    }


def later_records(store: Store, retirement: Retirement) -> list[RecordView]:
    """The namespace's records after the retirement's, oldest first, that are in force (undo
    records and what they undid cancel out: a check undoes and at once redoes)."""
    found: list[RecordView] = []
    after = retirement.record_id
    while page := store.db.records.after(after, limit=500):
        found += [
            r
            for r in page
            if r.namespace == retirement.namespace and r.job != "undo" and r.undone_by_id is None
        ]
        after = page[-1].id
    return found


def roll_back(copy: Store, retirement: Retirement, *, now: datetime) -> dict[str, Any]:
    """In a copy: undo the later records newest first, then the retirement's record."""
    writer = copy.db.writer
    later = later_records(copy, retirement)
    undone = 0
    refused: list[str] = []
    for record in [*reversed(later), None]:
        record_id = retirement.record_id if record is None else record.id
        try:
            undo(writer, record_id, now=now)
            undone += 1
        except NothingToUndo:
            continue
        except StoreError as exc:  # refused: the rest is tried all the same
            job = "the record itself" if record is None else record.job
            refused.append(f"{job}: {str(exc)[:160]}")
    views = {m.id: m for m in copy.db.memories.many(retirement.namespace, retirement.retired)}
    restored = sum(
        1
        for memory_id, content in retirement.retired.items()
        if (view := views.get(memory_id)) is not None
        and view.status == "active"
        and view.content == content
    )
    return {
        "record": retirement.record_id,
        "records_undone": undone,
        "retired": len(retirement.retired),
        "restored": restored,
        "refused": refused,
    }


def purged_gone(store: Store, retirement: Retirement) -> dict[str, Any]:
    """The retired memories of an old record: gone from the export, and beyond undo (its
    plan has nothing that would bring them back)."""
    present = {m.id for m in store.db.memories.many(retirement.namespace, retirement.retired)}
    try:
        plan = plan_undo(store.db.writer, retirement.record_id)
        restorable = {
            step.target_id
            for step in plan.applicable
            if step.kind == "memory" and step.action in ("restore", "recreate")
        }
    except NothingToUndo:
        restorable = set()
    return {
        "record": retirement.record_id,
        "retired": len(retirement.retired),
        "still_present": len(present),
        "beyond_undo": len(set(retirement.retired) - restorable),
    }
