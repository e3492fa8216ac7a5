"""Undo's view of conflicts: what the database holds now, and which steps cannot be applied.

Undo is field by field: a step restores only the fields its record changed, so a later change
to other fields of the same row is kept and is no conflict. A step conflicts when a later
change touched one of those fields (or, for a row the record created, any field a person
sees), or when applying it alongside the other steps would leave a dangling reference or a
duplicate key. Derived state (timeline links, version, updated_at, content_hash) is never
compared: the undo recomputes it. Each conflict names the row that blocks it (``blocker``), so
store.write.undo can name the later records that depend on what is undone.

The checks are pure functions over a Snapshot; ``read_snapshot`` alone reads the database.
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
# A memory's place on the timeline: derived from the event times of the namespace's active
# memories, so a neighbour's later arrival or departure is no change to the memory itself.
TIMELINE_FIELDS = ("prev_id", "next_id")
# What the store recomputes rather than keeps: the timeline, the change counter and its date,
# the hash of the content. Undo neither compares these nor writes them back from an image.
DERIVED_FIELDS = frozenset({*TIMELINE_FIELDS, "version", "updated_at", "content_hash"})
_NOT_COMPARED = RECALL_FIELDS | DERIVED_FIELDS | {"id"}
# Blocking "fields" meaning only that the row came or went: a later record blocks such a
# conflict only by creating or removing the row (no image has an "id" that changes).
EXISTENCE = ("id",)
# A row a later forget or retention purge erased: its images keep ids and a hash, no content.
ERASED = "erased since"
# Columns that name another memory: a restored value must name one that exists.
REFERENCES = {"memory": ("replaced_by_id",), "relation": ("source_id", "target_id")}


def visible(image: Mapping[str, Any]) -> Image:
    """Return the fields of an image that undo compares and restores: what a person sees."""
    return {name: value for name, value in image.items() if name not in _NOT_COMPARED}


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
    # The row whose later change blocks this one (itself, a row that refers to it, ...), and
    # which of its fields: store.write.undo looks up the later records that changed them.
    blocker: Key | None = None
    blocking_fields: tuple[str, ...] = ()

    def describe(self) -> str:
        diffs = ", ".join(
            f"{d.field} ({_short(d.expected)} after it, now {_short(d.current)})"
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
        """The fields the record changed that undo restores (derived state aside)."""
        before, after = visible(self.image or {}), visible(self.expected or {})
        return sorted(
            name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
        )

    def describe(self) -> str:
        what = f"{self.action} {self.kind} {self.target_id}"
        return f"{what}: {', '.join(self.changed_fields())}" if self.action == "restore" else what


def _short(value: Any, limit: int = 60) -> str:
    text = "empty" if value is None else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def carried_recalls(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """Whether a record itself changed a memory's recall count or last recall: a merged exact
    duplicate's recalls carried to its keeper (``CarryRecalls``), which its undo takes back."""
    if before is None or after is None:
        return False
    return any(before.get(name) != after.get(name) for name in ("access_count", "last_accessed"))


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
    """Compare the row as it is now with what the record left (derived state aside).

    A restore compares only the fields the record changed (a later change to one of them is a
    conflict even if it wrote the value undo would: that record depends on this one's change);
    a row the record created, or a memory it made active that the undo retires again, must be
    as it left it.
    """
    key = step.key
    if any(image is not None and image.get("forgotten") for image in (step.image, step.expected)):
        return Conflict(kind=step.kind, target_id=step.target_id, reason=ERASED, blocker=key)
    if step.expected is None:
        if current is None:
            return None
        return Conflict(
            kind=step.kind,
            target_id=step.target_id,
            reason="exists again",
            blocker=key,
            blocking_fields=EXISTENCE,
        )
    if current is None:
        return Conflict(
            kind=step.kind,
            target_id=step.target_id,
            reason="deleted since",
            blocker=key,
            blocking_fields=EXISTENCE,
        )
    expected, now = visible(step.expected), visible(current)
    if step.action == "restore" and not _retires(step):
        names = [n for n in step.changed_fields() if now.get(n) != expected.get(n)]
    else:  # a row the record made, or one it put back in use: any later change needs it
        names = sorted(n for n in expected.keys() | now.keys() if expected.get(n) != now.get(n))
    if not names:
        return None
    diffs = tuple(FieldDiff(field=n, expected=expected.get(n), current=now.get(n)) for n in names)
    return Conflict(
        kind=step.kind,
        target_id=step.target_id,
        reason="changed since",
        fields=diffs,
        blocker=key,
        blocking_fields=tuple(names),
    )


def _written(step: UndoStep) -> list[tuple[str, int | None]]:
    """Return (column, value) for every reference column the step writes (None included)."""
    image = step.image or {}
    names = REFERENCES.get(step.kind, ())
    if step.action == "restore":
        changed = set(step.changed_fields())
        names = tuple(name for name in names if name in changed)
    return [(name, image.get(name)) for name in names]


def _retires(step: UndoStep) -> bool:
    """Tell whether the step takes a memory the record made active out of use again: a later
    change to it (an edit needs an active memory) then depends on the record."""
    active = "active"
    return (
        step.kind == "memory"
        and (step.expected or {}).get("status") == active
        and (step.image or {}).get("status") != active
    )


def _references(step: UndoStep) -> list[tuple[str, int]]:
    """Return (column, memory id) for every memory the step writes a reference to."""
    return [(name, value) for name, value in _written(step) if value is not None]


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
        missing = [(name, mid) for name, mid in _references(s) if not outcome.exists(mid)]
        if s.action != "delete" and missing:
            named = ", ".join(f"{name} -> {mid}" for name, mid in missing)
            reason = f"would point at memories that would not exist ({named})"
            yield Conflict(
                kind=s.kind,
                target_id=s.target_id,
                reason=reason,
                blocker=("memory", missing[0][1]),
                blocking_fields=EXISTENCE,  # whoever removed it, not who changed it before
            )


def _still_referred(outcome: _Outcome) -> Iterator[Conflict]:
    """Memories to delete that rows left in place still refer to (the delete would cascade)."""
    gone = {
        "memory": outcome.ids("memory", "delete"),
        "relation": outcome.ids("relation", "delete"),
    }
    # The references the applied steps write back: a column the undo restores away from mid.
    restored = {
        (s.kind, s.target_id, name): value
        for s in outcome.applied
        if s.action != "delete"
        for name, value in _written(s)
    }
    for mid in sorted(gone["memory"]):
        for kind, row_id, column in outcome.snap.referrers.get(mid, ()):
            if row_id in gone[kind] or restored.get((kind, row_id, column), mid) != mid:
                continue
            if kind == "relation":
                end = "from" if column == "source_id" else "to"
                reason = f"relation {row_id} still links {end} it"
            else:
                reason = f"memory {row_id} still names it as its replacement"
            yield Conflict(
                kind="memory",
                target_id=mid,
                reason=reason,
                blocker=(kind, row_id),
                blocking_fields=(column,),
            )


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
            yield Conflict(
                kind=s.kind,
                target_id=s.target_id,
                reason=reason,
                blocker=(s.kind, holder),
                blocking_fields=("external_id",) if s.kind == "memory" else EXISTENCE,
            )


def _dependency_conflicts(
    steps: Sequence[UndoStep], found: Mapping[Key, Conflict], snap: Snapshot
) -> dict[Key, Conflict]:
    """Given the conflicts so far, find steps that the skipped ones would break."""
    applied = [step for step in steps if step.key not in found]
    outcome = _Outcome(applied=applied, snap=snap)
    more: dict[Key, Conflict] = {}
    for check in (_dangling(outcome), _still_referred(outcome), _duplicates(outcome)):
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
        # Timeline links are no reference here: the undo takes the memory off the timeline.
        merged = session.execute(
            select(Memory.id, Memory.replaced_by_id).where(Memory.replaced_by_id.in_(chunk))
        )
        for row_id, into in merged:
            if into is not None:
                found.setdefault(into, []).append(("memory", row_id, "replaced_by_id"))
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
