"""Undo's view of conflicts: what the database holds now, and which steps cannot be applied.

A step conflicts when its row changed since the record (recall statistics aside), or when
applying it alongside the other steps would leave a dangling link or a duplicate key. The
checks are pure functions over a Snapshot; ``read_snapshot`` alone reads the database.
Conversation log lines are only ever restored (a record images a line only when an ingest
updated it): such a step conflicts when the line changed since, or was forgotten.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from store.db import CHUNK, chunks
from store.images import log_image, memory_image, relation_image
from store.models import ConversationLog, Memory, MemoryRelation

Image = dict[str, Any]
Key = tuple[str, int]  # ("memory" | "relation" | "log", id)
Action = Literal["delete", "restore", "recreate"]

RECALL_FIELDS = frozenset({"access_count", "last_accessed", "base_importance"})
LINK_FIELDS = ("prev_id", "next_id", "replaced_by_id")
# A memory's place on the timeline: derived from the event times of the namespace's active
# memories, so a neighbour's later arrival or departure is no change to the memory itself.
TIMELINE_FIELDS = ("prev_id", "next_id")


def kept_links(step: UndoStep) -> frozenset[str]:
    """The timeline links a memory step did not change (before = after): undo neither compares
    them with the row as it is now nor writes them back; the timeline keeps what it became."""
    if step.kind != "memory" or step.image is None or step.expected is None:
        return frozenset()
    return frozenset(n for n in TIMELINE_FIELDS if step.image.get(n) == step.expected.get(n))


# -- steps and conflicts ------------------------------------------------------------------------


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
        before, after = strip_recall(self.image or {}), strip_recall(self.expected or {})
        return sorted(
            name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
        )

    def describe(self) -> str:
        what = f"{self.action} {self.kind} {self.target_id}"
        return f"{what}: {', '.join(self.changed_fields())}" if self.action == "restore" else what


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def strip_recall(image: Mapping[str, Any]) -> Image:
    """Return the image without its recall statistics, which undo neither compares nor restores."""
    return {name: value for name, value in image.items() if name not in RECALL_FIELDS}


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
    logs: Mapping[int, Image] = field(default_factory=dict)  # the steps' log lines

    def current(self, key: Key) -> Image | None:
        rows = {"memory": self.memories, "relation": self.relations, "log": self.logs}
        return rows[key[0]].get(key[1])


def _direct_conflict(step: UndoStep, current: Image | None) -> Conflict | None:
    """Compare the row as it is now with the record's after image (recall statistics aside)."""
    if any(image is not None and image.get("forgotten") for image in (step.image, step.expected)):
        return Conflict(kind=step.kind, target_id=step.target_id, reason="forgotten since")
    if step.expected is None:
        if current is None:
            return None
        return Conflict(kind=step.kind, target_id=step.target_id, reason="exists again")
    if current is None:
        return Conflict(kind=step.kind, target_id=step.target_id, reason="deleted since")
    expected, now = strip_recall(step.expected), strip_recall(current)
    derived = kept_links(step)
    diffs = tuple(
        FieldDiff(field=name, expected=expected.get(name), current=now.get(name))
        for name in sorted(expected.keys() | now.keys())
        if expected.get(name) != now.get(name) and name not in derived
    )
    if not diffs:
        return None
    return Conflict(kind=step.kind, target_id=step.target_id, reason="changed since", fields=diffs)


def _references(step: UndoStep) -> list[tuple[str, int]]:
    """Return (column, memory id) for every memory the step's restored image points at."""
    image = step.image or {}
    ends = {"memory": LINK_FIELDS, "relation": ("source_id", "target_id")}.get(step.kind, ())
    return [(name, image[name]) for name in ends if image.get(name) is not None]


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
    if step.action != "recreate" or step.image is None or step.kind == "log":
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


def _memory_ids(steps: Sequence[UndoStep]) -> set[int]:
    ids = {s.target_id for s in steps if s.kind == "memory"}
    for step in steps:
        ids.update(mid for _, mid in _references(step))
    return ids


def read_snapshot(session: Session, namespace: str, steps: Sequence[UndoStep]) -> Snapshot:
    """Read what the steps' conflict checks need to know, in chunks of ids."""
    memories: dict[int, Image] = {}
    for chunk in chunks(_memory_ids(steps)):
        memories.update(
            {
                m.id: memory_image(m)
                for m in session.scalars(select(Memory).where(Memory.id.in_(chunk)))
            }
        )
    relations: dict[int, Image] = {}
    for chunk in chunks(s.target_id for s in steps if s.kind == "relation"):
        rows = session.scalars(select(MemoryRelation).where(MemoryRelation.id.in_(chunk)))
        relations.update({r.id: relation_image(r) for r in rows})
    logs: dict[int, Image] = {}
    for chunk in chunks(s.target_id for s in steps if s.kind == "log"):
        lines = session.scalars(select(ConversationLog).where(ConversationLog.id.in_(chunk)))
        logs.update({line.id: log_image(line) for line in lines})
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
        logs=logs,
    )


def _referrers(
    session: Session, memory_ids: Sequence[int]
) -> dict[int, tuple[tuple[str, int, str], ...]]:
    found: dict[int, list[tuple[str, int, str]]] = {}
    for chunk in chunks(memory_ids):
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
    for start in range(0, len(external), CHUNK):
        rows = session.execute(
            select(Memory.external_id, Memory.id).where(
                Memory.namespace == namespace,
                Memory.external_id.in_(external[start : start + CHUNK]),
            )
        )
        found.update({ext: mid for ext, mid in rows if ext is not None})
    return found


def _edges(session: Session, images: Sequence[Image]) -> dict[tuple[int, int, str], int]:
    wanted = {(i["source_id"], i["target_id"], i["type"]) for i in images}
    found: dict[tuple[int, int, str], int] = {}
    for chunk in chunks(source for source, _, _ in wanted):
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
