"""Random histories of one namespace, and their replay without some of their records.

The harness of tests/store/write/test_undo_replay.py and bench/undo_histories.py (issue 25,
item 3): a selective undo of record R must leave the store as the same history would have
left it without R (and without the later records it cascaded to).

- A *history* is a list of steps (``Step``: a name and three selectors) turned, one at a time
  and against the namespace as it is then, into concrete actions: an ingest through
  ``Writer.add_memories``, a person's edit or delete (``store.write.edits``), a job-like plan
  through ``Writer.apply`` with the operations the jobs use (extractor, linker, auditor merge,
  supersede and archive, soul mapper new trait, update and revision, consolidator), or an undo
  of one of its records (an undo of an undo included). Each recorded action is kept as a
  ``Done``: what was performed, the record it left and the memories that record created.
- A *replay* performs every recorded action again in a fresh namespace, except the skipped
  records (and the undos of skipped records, which have nothing to undo there), translating
  the original memory ids and record ids to those of the replay. A plan is replayed with its
  concrete effect: an ``InheritRelations`` becomes the relations it created, and a
  ``CreateRelation`` that created nothing (the edge was there) is dropped; every other
  operation is replayed as it was, with translated ids.
  An action that names a memory created only by a skipped record, or that the replay refuses,
  raises ``ReplayError``: the undo should have named that action's record as a dependent.
- Stores are compared canonically (``canonical``/``differences``): user-visible fields of
  every memory (keyed by the original run's id), relations as a set of edges with strength and
  description, and the timeline (the chain from the head through next_id must be the active
  memories sorted by (event_time, id), with prev_id consistent); content_hash must match the
  content. Ids, versions, timestamps of writes, links and recall statistics are not compared.

Contents, tags, metadata and event times are fresh values from a counter, never ids, so that
a replay writes the same values, and every field a step sets differs from the value it has
then (a step is never a silent no-op on a field a skipped record changed).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from store.database import Database
from store.db import session_factory
from store.errors import StoreError
from store.kinds import MemoryStatus, RecordStatus
from store.models import MaintenanceOperation, MaintenanceRecord, Memory, MemoryRelation
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Ref,
    SetStatus,
    UpdateMemory,
)
from store.schemas import MemoryIn
from store.text import content_hash
from store.write import edits
from store.write.undo import AlreadyUndone, NothingToUndo, UndoConflict, undo

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ACTIVE = MemoryStatus.ACTIVE.value
# State an undo recomputes rather than compares: a conflict on these alone is a false one.
DERIVED_FIELDS = frozenset({"prev_id", "next_id", "version", "updated_at", "content_hash"})

# -- steps ---------------------------------------------------------------------------------------

# How often each step is drawn by ``random_steps`` (hypothesis draws from STEP_NAMES).
STEP_WEIGHTS: dict[str, int] = {
    "ingest": 3,
    "extractor": 2,
    "linker": 3,
    "merge": 2,
    "supersede": 1,
    "archive": 1,
    "soul_new": 1,
    "soul_update": 2,
    "soul_revise": 1,
    "consolidate": 1,
    "edit": 3,
    "delete": 1,
    "undo": 3,
    "undo_cascade": 1,  # an undo with cascade=True (an undo without it, before cascade existed)
}
STEP_NAMES = tuple(STEP_WEIGHTS)
PICK = 1000  # selectors are drawn from 0..PICK and taken modulo the candidates there are


@dataclass(frozen=True)
class Step:
    """A drawn step: interpreted against the namespace as it is when it runs."""

    name: str
    a: int = 0
    b: int = 0
    c: int = 0

    def __str__(self) -> str:
        return f"{self.name}({self.a},{self.b},{self.c})"


def random_steps(rng: random.Random, count: int) -> list[Step]:
    names, weights = list(STEP_WEIGHTS), list(STEP_WEIGHTS.values())
    return [
        Step(rng.choices(names, weights)[0], *(rng.randint(0, PICK) for _ in range(3)))
        for _ in range(count)
    ]


# The ingest every history starts with when seeded: something for the first steps to act on.
SEED_STEP = Step("ingest", 3, 0, 0)

# -- concrete actions (ids of the namespace they ran in) ----------------------------------------


@dataclass(frozen=True)
class Ingest:
    items: tuple[MemoryIn, ...]


@dataclass(frozen=True)
class Edit:
    memory_id: int
    changes: Mapping[str, Any]


@dataclass(frozen=True)
class Delete:
    memory_id: int


@dataclass(frozen=True)
class Plan:
    job: str
    operations: tuple[Operation, ...]


@dataclass(frozen=True)
class Undo:
    record_id: int
    cascade: bool = False


ActionT = Ingest | Edit | Delete | Plan | Undo
Edge = tuple[int, int, str]


@dataclass(frozen=True, kw_only=True)
class Done:
    """One recorded action of a history."""

    index: int  # its place in the history
    label: str  # the step's name
    action: ActionT  # as performed
    replay: ActionT  # as a replay performs it (a plan's concrete effect)
    record_id: int
    now: datetime
    created: tuple[int, ...]  # memories its record created (before IS NULL), in seq order
    edges: tuple[Edge, ...] = ()  # relations its record created, in seq order
    undid: tuple[int, ...] = ()  # an undo: the records it undid (its target, then cascaded)

    def describe(self) -> str:
        undid = f" (undid {list(self.undid)})" if len(self.undid) > 1 else ""
        return f"#{self.index} record {self.record_id} {self.label}: {_show(self.action)}{undid}"


def _show(action: ActionT) -> str:
    if isinstance(action, Ingest):
        return "ingest " + "; ".join(
            f"{i.content!r}@{i.timestamp:%H:%M}"
            + (f" ext={i.external_id}" if i.external_id else "")
            for i in action.items
        )
    if isinstance(action, Plan):
        return f"{action.job}: " + "; ".join(_show_op(op) for op in action.operations)
    return repr(action)


def _show_op(op: Operation) -> str:
    if isinstance(op, CreateMemory):
        skip = f" replacing {list(op.replaces_in_timeline)}" if op.replaces_in_timeline else ""
        return f"create {op.key}={op.content!r} {op.type}@{op.event_time:%H:%M}{skip}"
    if isinstance(op, UpdateMemory):
        return f"update {op.memory_id} {dict(op.changes)}"
    if isinstance(op, SetStatus):
        by = f" by {op.replaced_by}" if op.replaced_by is not None else ""
        return f"status {op.memory_id} {op.status.value}{by}"
    if isinstance(op, CreateRelation):
        return f"relate {op.source}->{op.target} {op.type} {op.strength}"
    if isinstance(op, InheritRelations):
        return f"inherit {list(op.from_ids)}->{op.to}{' context' if op.context else ''}"
    return repr(op)


# -- reading the namespace ------------------------------------------------------------------------


def memories(db: Database, namespace: str) -> list[Memory]:
    with session_factory(db.engine)() as session:
        query = select(Memory).where(Memory.namespace == namespace).order_by(Memory.id)
        return list(session.scalars(query))


def relations(db: Database, namespace: str) -> list[MemoryRelation]:
    with session_factory(db.engine)() as session:
        query = select(MemoryRelation).where(MemoryRelation.namespace == namespace)
        return list(session.scalars(query.order_by(MemoryRelation.id)))


def records(db: Database, namespace: str) -> list[MaintenanceRecord]:
    with session_factory(db.engine)() as session:
        query = select(MaintenanceRecord).where(MaintenanceRecord.namespace == namespace)
        return list(session.scalars(query.order_by(MaintenanceRecord.id)))


def record(db: Database, record_id: int) -> MaintenanceRecord:
    with session_factory(db.engine)() as session:
        row = session.get(MaintenanceRecord, record_id)
        assert row is not None, f"record {record_id} does not exist"
        return row


def in_force(row: MaintenanceRecord) -> bool:
    return row.undone_by_id is None and row.status != RecordStatus.UNDONE.value


def record_effects(db: Database, record_id: int) -> tuple[tuple[int, ...], tuple[Edge, ...]]:
    """The memories and the relations (as edges) a record created, in seq order."""
    with session_factory(db.engine)() as session:
        ops = session.scalars(
            select(MaintenanceOperation)
            .where(MaintenanceOperation.record_id == record_id)
            .order_by(MaintenanceOperation.seq)
        ).all()
    made = [(op.target_kind, op.target_id, op.after) for op in ops if op.before is None]
    created = tuple(target for kind, target, _ in made if kind == "memory")
    edges = tuple(
        (after["source_id"], after["target_id"], after["type"])
        for kind, _, after in made
        if kind == "relation" and after is not None
    )
    return created, edges


def created_relations(db: Database, record_id: int) -> list[dict[str, Any]]:
    """The images of the relations a record created, in seq order (a JSON null is no SQL
    NULL: the filter is in Python)."""
    with session_factory(db.engine)() as session:
        ops = session.scalars(
            select(MaintenanceOperation)
            .where(
                MaintenanceOperation.record_id == record_id,
                MaintenanceOperation.target_kind == "relation",
            )
            .order_by(MaintenanceOperation.seq)
        ).all()
    return [dict(op.after) for op in ops if op.before is None and op.after is not None]


# -- performing an action -----------------------------------------------------------------------

CASCADE = "cascade" in inspect.signature(undo).parameters  # the undo of issue 25 has it


def run_undo(db: Database, record_id: int, *, now: datetime, cascade: bool | None = None) -> Any:
    """``undo`` with ``cascade`` passed only when given (the API before cascade lacks it)."""
    if cascade is None:
        return undo(db.writer, record_id, now=now)
    return undo(db.writer, record_id, now=now, cascade=cascade)


def perform(db: Database, namespace: str, action: ActionT, now: datetime) -> tuple[int | None, Any]:
    """Perform an action; return its record id (None: nothing recorded) and the raw result.

    Undo's refusals propagate (UndoConflict, AlreadyUndone, NothingToUndo).
    """
    if isinstance(action, Ingest):
        added = db.writer.add_memories(namespace, list(action.items), now=now)
        return added.record_id, added
    if isinstance(action, Edit):
        edited = edits.edit(db.writer, namespace, action.memory_id, action.changes, now=now)
        return edited.record_id, edited
    if isinstance(action, Delete):
        deleted = edits.delete(db.writer, namespace, action.memory_id, now=now)
        return deleted.record_id, deleted
    if isinstance(action, Plan):
        applied = db.writer.apply(namespace, action.job, action.operations, now=now)
        return applied.record_id, applied
    result = run_undo(db, action.record_id, now=now, cascade=True if action.cascade else None)
    return result.record_id, result


# -- turning a step into an action -------------------------------------------------------------

_TYPES = ("event", "fact", "preference", "tool_experience")
_WORDS = (
    "coffee",
    "garden",
    "paris",
    "piano",
    "budget",
    "dentist",
    "hiking",
    "invoice",
    "sister",
    "python",
    "train",
    "birthday",
    "recipe",
    "meeting",
    "novel",
    "football",
    "deadline",
    "allergy",
    "guitar",
    "museum",
)
_RELATION_TYPES = ("associative", "causal", "thematic", "contradicts")


class _Fresh:
    """Values that no earlier step of the history wrote."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def number(self) -> int:
        return next(self._counter)

    def text(self, kind: str) -> str:
        n = self.number()
        return f"{kind} {_WORDS[n % len(_WORDS)]} {_WORDS[(n * 7) % len(_WORDS)]} number {n}"

    def minute(self, avoid: datetime | None = None) -> datetime:
        while True:
            at = T0 + timedelta(minutes=(self.number() * 37) % 240)
            if at != avoid:
                return at


@dataclass
class _State:
    rows: list[Memory]
    edges: set[Edge]

    @property
    def active(self) -> list[Memory]:
        return [m for m in self.rows if m.status == ACTIVE]

    @property
    def timeline(self) -> list[Memory]:
        return sorted(self.active, key=lambda m: (m.event_time, m.id))

    def traits(self) -> list[Memory]:
        return [m for m in self.active if m.type == "preference"]


def _two(rows: Sequence[Memory], a: int, b: int) -> tuple[Memory, Memory] | None:
    if len(rows) < 2:
        return None
    first = rows[a % len(rows)]
    second = rows[b % len(rows)]
    if second.id == first.id:
        second = rows[(b + 1) % len(rows)]
    return first, second


def action_for(
    step: Step, state: _State, fresh: _Fresh, records: Sequence[int]
) -> tuple[str, ActionT] | None:
    """The concrete action a step means in the namespace as it is, with the name of what it
    turned out to be (a soul mapper update with no trait to update makes a new one); None:
    nothing to act on."""
    name = _effective(step.name, state)
    action = _action(name, step, state, fresh, records)
    return (name, action) if action is not None else None


def _effective(name: str, state: _State) -> str:
    if name in ("soul_update", "soul_revise") and not state.traits():
        return "soul_new"
    return name


def _action(
    name: str, step: Step, state: _State, fresh: _Fresh, records: Sequence[int]
) -> ActionT | None:
    active, a, b, c = state.active, step.a, step.b, step.c
    if name == "ingest":
        items = []
        for i in range(1 + a % 3):
            n = fresh.number()
            items.append(
                MemoryIn(
                    content=fresh.text("said"),
                    timestamp=fresh.minute(),
                    session_id=f"s{(b + i) % 3}",
                    type=_TYPES[(c + i) % 2],
                    tags=(f"t{n}",) if (b + i) % 2 else (),
                    importance=1 + (c + i) % 9,
                    external_id=f"x{n}" if (c + i) % 3 == 0 else None,
                )
            )
        return Ingest(tuple(items))
    if name == "extractor":
        return Plan(
            "extractor",
            tuple(
                CreateMemory(
                    key=f"m{i}",
                    content=fresh.text("extracted"),
                    type=_TYPES[(b + i) % 2],
                    event_time=fresh.minute(),
                    importance=1 + (c + i) % 9,
                    tags=(f"t{fresh.number()}",),
                    session_id=f"s{(b + i) % 3}",
                    metadata={"extracted": fresh.number()},
                    source="extractor",
                )
                for i in range(1 + a % 3)
            ),
        )
    if name == "linker" and len(active) >= 2:
        ops: list[Operation] = []
        planned: set[Edge] = set()
        for i in range(1 + a % 3):
            pair = _two(active, b + 5 * i, c + 3 * i)
            assert pair is not None
            kind = _RELATION_TYPES[(a + i) % len(_RELATION_TYPES)]
            edge = (pair[0].id, pair[1].id, kind)
            if edge in state.edges or edge in planned:
                continue
            planned.add(edge)
            ops.append(
                CreateRelation(
                    source=edge[0],
                    target=edge[1],
                    type=kind,
                    strength=round(0.05 + ((b + i) % 10) / 10, 2),
                    description=fresh.text("because"),
                )
            )
        return Plan("linker", tuple(ops)) if ops else None
    if name == "merge" and (pair := _two(active, a, b)) is not None:
        dup, keeper = pair
        ops = [UpdateMemory(memory_id=keeper.id, changes={"content": fresh.text("merged")})]
        return Plan(
            "auditor",
            (
                *(ops if c % 2 else ()),
                InheritRelations(from_ids=(dup.id,), to=keeper.id),
                SetStatus(memory_id=dup.id, status=MemoryStatus.MERGED, replaced_by=keeper.id),
            ),
        )
    if name == "supersede" and (pair := _two(active, a, b)) is not None:
        old, new = pair
        return Plan(
            "auditor",
            (
                InheritRelations(from_ids=(old.id,), to=new.id, context=True),
                SetStatus(memory_id=old.id, status=MemoryStatus.SUPERSEDED, replaced_by=new.id),
            ),
        )
    if name == "archive" and active:
        target = active[a % len(active)]
        return Plan("auditor", (SetStatus(memory_id=target.id, status=MemoryStatus.ARCHIVED),))
    if name == "soul_new" and active:
        return Plan("soul_mapper", _trait(active, a, b, fresh, previous=None))
    if name == "soul_update" and (traits := state.traits()):
        trait = traits[a % len(traits)]
        changes = {"content": fresh.text("trait"), "tags": ["trait", f"t{fresh.number()}"]}
        return Plan("soul_mapper", (UpdateMemory(memory_id=trait.id, changes=changes),))
    if name == "soul_revise" and (traits := state.traits()):
        previous = traits[a % len(traits)]
        evidence = [m for m in active if m.id != previous.id] or [previous]
        return Plan("soul_mapper", _trait(evidence, b, c, fresh, previous=previous.id))
    if name == "consolidate" and len(state.timeline) >= 2:
        line = state.timeline
        start = a % (len(line) - 1)
        group = tuple(m.id for m in line[start : start + 2 + b % 2])
        return Plan(
            "consolidator",
            (
                CreateMemory(
                    key="s",
                    content=fresh.text("summary"),
                    type="interaction_summary",
                    event_time=line[start].event_time,
                    importance=1 + c % 9,
                    tags=(f"t{fresh.number()}",),
                    metadata={"fragments": len(group)},
                    source="consolidator",
                    replaces_in_timeline=group,
                ),
                InheritRelations(from_ids=group, to="s"),
                *(
                    CreateRelation(source="s", target=g, type="derived_from", strength=1.0)
                    for g in group
                ),
                *(
                    SetStatus(memory_id=g, status=MemoryStatus.MERGED, replaced_by="s")
                    for g in group
                ),
            ),
        )
    if name == "edit" and active:
        target = active[a % len(active)]
        return Edit(target.id, _edit_changes(target, b % 127 + 1, c, fresh))
    if name == "delete" and active:
        return Delete(active[a % len(active)].id)
    if name in ("undo", "undo_cascade") and records:
        return Undo(records[a % len(records)], cascade=name == "undo_cascade" and CASCADE)
    return None


def _trait(
    evidence: Sequence[Memory], a: int, b: int, fresh: _Fresh, *, previous: int | None
) -> tuple[Operation, ...]:
    chosen = {m.id: m for m in (evidence[a % len(evidence)], evidence[b % len(evidence)])}
    ops: list[Operation] = [
        CreateMemory(
            key="t",
            content=fresh.text("trait"),
            type="preference",
            event_time=max(m.event_time for m in chosen.values()),
            importance=1 + a % 9,
            tags=("trait",),
            metadata={"trait": fresh.number()},
            source="soul_mapper",
        ),
        *(CreateRelation(source="t", target=m, type="derived_from", strength=0.7) for m in chosen),
    ]
    if previous is not None:
        ops += [
            InheritRelations(from_ids=(previous,), to="t"),
            SetStatus(memory_id=previous, status=MemoryStatus.SUPERSEDED, replaced_by="t"),
        ]
    return tuple(ops)


def _edit_changes(target: Memory, mask: int, c: int, fresh: _Fresh) -> dict[str, Any]:
    """A person's edit: the fields of ``mask``, each to a value it does not have."""
    changes: dict[str, Any] = {}
    if mask & 1:
        changes["content"] = fresh.text("edited")
    if mask & 2:
        changes["tags"] = [f"t{fresh.number()}"]
    if mask & 4:
        changes["importance"] = 1 + (target.importance + c % 8) % 10
    if mask & 8:
        changes["metadata"] = {"edited": fresh.number()}
    if mask & 16:
        changes["event_time"] = fresh.minute(avoid=target.event_time)
    if mask & 32:
        changes["pinned"] = not target.pinned
    if mask & 64:
        others = [t for t in _TYPES if t != target.type]
        changes["type"] = others[c % len(others)]
    return changes


def concrete_plan(
    plan: Plan, applied_created: Mapping[str, int], made: list[dict[str, Any]]
) -> Plan:
    """The plan as a replay performs it: each InheritRelations replaced by the relations it
    created, each CreateRelation that created nothing dropped, the rest as it was."""
    keys = {memory_id: key for key, memory_id in applied_created.items()}

    def resolve(ref: Ref) -> int:
        return applied_created[ref] if isinstance(ref, str) else ref

    def ref(memory_id: int) -> Ref:
        return keys.get(memory_id, memory_id)

    made_edges = {(r["source_id"], r["target_id"], r["type"]) for r in made}
    explicit = set()
    for op in plan.operations:
        if isinstance(op, CreateRelation):
            edge = (resolve(op.source), resolve(op.target), op.type)
            if edge in made_edges:
                explicit.add(edge)
    inherited = [r for r in made if (r["source_id"], r["target_id"], r["type"]) not in explicit]
    inherits = [op for op in plan.operations if isinstance(op, InheritRelations)]
    assert len(inherits) <= 1 or not inherited, "one InheritRelations a plan, in these histories"
    out: list[Operation] = []
    for op in plan.operations:
        if isinstance(op, CreateRelation):
            if (resolve(op.source), resolve(op.target), op.type) in explicit:
                out.append(op)
        elif isinstance(op, InheritRelations):
            out += [
                CreateRelation(
                    source=ref(r["source_id"]),
                    target=ref(r["target_id"]),
                    type=r["type"],
                    strength=r["strength"],
                    description=r["description"],
                )
                for r in inherited
            ]
        else:
            out.append(op)
    return Plan(plan.job, tuple(out))


# -- histories ---------------------------------------------------------------------------------


@dataclass
class History:
    db: Database
    namespace: str
    steps: list[Step] = field(default_factory=list)
    done: list[Done] = field(default_factory=list)
    creator: dict[int, int] = field(default_factory=dict)  # memory id -> record that made it
    clock: Iterator[datetime] = field(
        default_factory=lambda: (T0 + timedelta(hours=n) for n in itertools.count(1))
    )
    fresh: _Fresh = field(default_factory=_Fresh)
    refused: int = 0  # undos of the history that were refused (they record nothing)

    def now(self) -> datetime:
        return next(self.clock)

    def step(self, step: Step) -> Done | None:
        """Perform a step; return what it recorded (None: nothing)."""
        self.steps.append(step)
        state = _State(
            rows=memories(self.db, self.namespace),
            edges={(r.source_id, r.target_id, r.type) for r in relations(self.db, self.namespace)},
        )
        known = [r.id for r in records(self.db, self.namespace)]
        chosen = action_for(step, state, self.fresh, known)
        if chosen is None:
            return None
        label, action = chosen
        now = self.now()
        try:
            record_id, result = perform(self.db, self.namespace, action, now)
        except (UndoConflict, AlreadyUndone, NothingToUndo):
            self.refused += 1
            return None
        if record_id is None:
            return None
        return self.add(label, action, record_id, now, result)

    def add(self, label: str, action: ActionT, record_id: int, now: datetime, result: Any) -> Done:
        """Keep a recorded action (also one performed outside ``step``, such as the checks')."""
        created, edges = record_effects(self.db, record_id)
        replayed: ActionT = action
        undid: tuple[int, ...] = ()
        if isinstance(action, Plan):
            replayed = concrete_plan(action, result.created, created_relations(self.db, record_id))
        if isinstance(action, Undo):
            undid = (action.record_id, *getattr(result, "cascaded", ()))
        done = Done(
            index=len(self.done),
            label=label,
            action=action,
            replay=replayed,
            record_id=record_id,
            now=now,
            created=created,
            edges=edges,
            undid=undid,
        )
        self.done.append(done)
        for memory_id in created:
            self.creator.setdefault(memory_id, record_id)
        return done

    def describe(self) -> str:
        return "\n".join(done.describe() for done in self.done)


def run_history(db: Database, namespace: str, steps: Sequence[Step], *, seeded: bool) -> History:
    history = History(db=db, namespace=namespace)
    for step in ([SEED_STEP] if seeded else []) + list(steps):
        history.step(step)
    return history


# -- replay ------------------------------------------------------------------------------------


class ReplayError(AssertionError):
    """A recorded action that the replay cannot perform: the history depends on a skipped
    record in a way the undo did not name."""


@dataclass
class Replay:
    namespace: str
    ids: dict[int, int]  # original memory id -> replay memory id
    # original record id -> the replay's records for it (one, except for an undo whose targets
    # the replay partly skips: then one undo for each target it does not skip)
    records: dict[int, tuple[int, ...]]
    skipped: set[int]  # original records left out (asked for, and the undos of those)
    cancelled: list[int] = field(default_factory=list)  # left out with their undo, see replay

    def original_of(self) -> Callable[[int], Any]:
        back = {replay: original for original, replay in self.ids.items()}
        return lambda memory_id: back.get(memory_id, f"replay-only {memory_id}")


class _NoRecord(Exception):
    pass


def replay(db: Database, history: History, skipped: set[int], namespace: str) -> Replay:
    """Perform the history's recorded actions again in ``namespace``, except ``skipped`` and
    the undos of skipped records. Raise ReplayError if an action cannot be performed, or does
    not do in the replay what it did (other memories created or brought back, another
    cascade).

    An undo whose targets (the record and those it cascaded to) the replay partly skips is
    replayed as an undo of each target it does not skip, newest first.

    A record that is not in force (an undo of the history undid it, and that undo is in force)
    and that the replay cannot perform as it was performed, because it built on a skipped
    record, is left out together with its undo (undone again in the replay if it was
    performed): the two cancel, and only records in force depend on a record in the sense of
    undo.
    """
    undone = {r.id for r in records(db, history.namespace) if not in_force(r)}
    out = Replay(namespace=namespace, ids={}, records={}, skipped=set(skipped))
    for done in history.done:
        if done.record_id in out.skipped:
            continue
        targets = [r for r in done.undid if r not in out.skipped]
        if isinstance(done.action, Undo) and not targets:
            out.skipped.add(done.record_id)
            continue
        made: list[int] = []
        try:
            if isinstance(done.action, Undo) and (
                len(targets) < len(done.undid) or len(out.records[done.action.record_id]) > 1
            ):
                # Undo each replayed record of the targets, newest first (no cascade: the
                # newer ones are undone already).
                for rid in sorted((r for t in targets for r in out.records[t]), reverse=True):
                    made.append(run_undo(db, rid, now=done.now).record_id)
            else:
                action = _translate(done, history, out)
                record_id, result = perform(db, namespace, action, done.now)
                if record_id is None:
                    raise _NoRecord
                made.append(record_id)
                _check_effects(db, done, out, record_id, result)
        except (ReplayError, StoreError, ValueError, _NoRecord) as exc:
            if done.record_id in undone:
                for rid in reversed(made):  # performed, but not as it was: take it back
                    run_undo(db, rid, now=done.now)
                out.skipped.add(done.record_id)
                out.cancelled.append(done.record_id)
                continue
            if isinstance(exc, ReplayError):
                raise
            why = (
                "changes nothing"
                if isinstance(exc, _NoRecord)
                else (f"fails: {type(exc).__name__}: {exc}")
            )
            raise ReplayError(
                f"{done.describe()}\n  {why} in the replay without records"
                f" {sorted(out.skipped)}\n  -> record {done.record_id} depends on a skipped"
                " record, and the undo should have named it as a dependent"
            ) from exc
        out.records[done.record_id] = tuple(made)
    return out


def _check_effects(db: Database, done: Done, out: Replay, record_id: int, result: Any) -> None:
    """Raise ReplayError unless the replayed action created (or brought back) the memories the
    original did, and cascaded to the same records; extend the id translation."""
    created, _ = record_effects(db, record_id)
    if isinstance(done.action, Undo):
        cascaded = tuple(getattr(result, "cascaded", ()))
        wanted = tuple(out.records.get(r, (-r,))[-1] for r in done.undid[1:])
        if cascaded != wanted:
            raise ReplayError(
                f"{done.describe()}\n  cascaded to {cascaded} in the replay, not to {wanted}"
            )
        # An undo brings memories back under their ids, in an order of its own (those only a
        # skipped record made are not there to bring back).
        back = {out.ids[memory_id] for memory_id in done.created if memory_id in out.ids}
        if back != set(created):
            raise ReplayError(
                f"{done.describe()}\n  brought back {sorted(created)} in the replay, not the"
                f" translation of {list(done.created)}"
            )
        return
    if len(created) != len(done.created):
        raise ReplayError(
            f"{done.describe()}\n  created memories {list(done.created)} in the original"
            f" but {list(created)} in the replay"
        )
    for original, new in zip(done.created, created, strict=True):
        if out.ids.setdefault(original, new) != new:
            raise ReplayError(
                f"{done.describe()}\n  created memory {new} in the replay for {original},"
                f" which it knew as {out.ids[original]}"
            )


def _translate(done: Done, history: History, out: Replay) -> ActionT:
    def memory(memory_id: int) -> int:
        if memory_id in out.ids:
            return out.ids[memory_id]
        maker = history.creator.get(memory_id)
        raise ReplayError(
            f"{done.describe()}\n  names memory {memory_id}, created by record {maker}, which"
            f" the replay skips ({sorted(out.skipped)})\n  -> record {done.record_id} depends"
            " on it, and the undo should have named it as a dependent"
        )

    def ref(value: Ref | None) -> Ref | None:
        return memory(value) if isinstance(value, int) else value

    action = done.replay
    if isinstance(action, Ingest):
        return action
    if isinstance(action, Edit):
        return Edit(memory(action.memory_id), action.changes)
    if isinstance(action, Delete):
        return Delete(memory(action.memory_id))
    if isinstance(action, Undo):
        if action.record_id not in out.records:
            raise ReplayError(f"{done.describe()}\n  undoes a record the replay skipped")
        return replace(action, record_id=out.records[action.record_id][0])
    ops: list[Operation] = []
    for op in action.operations:
        if isinstance(op, CreateMemory):
            ops.append(
                replace(op, replaces_in_timeline=tuple(memory(m) for m in op.replaces_in_timeline))
            )
        elif isinstance(op, UpdateMemory):
            ops.append(replace(op, memory_id=memory(op.memory_id)))
        elif isinstance(op, SetStatus):
            ops.append(replace(op, memory_id=memory(op.memory_id), replaced_by=ref(op.replaced_by)))
        elif isinstance(op, CreateRelation):
            source, target = ref(op.source), ref(op.target)
            assert source is not None
            assert target is not None
            ops.append(replace(op, source=source, target=target))
        elif isinstance(op, InheritRelations):
            to = ref(op.to)
            assert to is not None
            ops.append(replace(op, from_ids=tuple(memory(m) for m in op.from_ids), to=to))
        else:
            raise AssertionError(f"no translation for {op!r}")
    return Plan(action.job, tuple(ops))


# -- comparing stores --------------------------------------------------------------------------

MEMORY_FIELDS = (
    "content",
    "type",
    "tags",
    "importance",
    "metadata",
    "event_time",
    "status",
    "pinned",
    "session_id",
    "source",
    "external_id",
    "replaced_by",
)


@dataclass(frozen=True)
class Canon:
    memories: Mapping[Any, tuple[Any, ...]]  # key -> MEMORY_FIELDS
    relations: frozenset[tuple[Any, ...]]  # (source, target, type, strength, description)
    timeline: tuple[Any, ...]  # keys of the active memories in (event_time, id) order
    problems: tuple[str, ...]  # a broken timeline chain, a stale content hash


def canonical(db: Database, namespace: str, key: Callable[[int], Any] = lambda i: i) -> Canon:
    rows = memories(db, namespace)
    problems: list[str] = []
    mems: dict[Any, tuple[Any, ...]] = {}
    for m in rows:
        mems[key(m.id)] = (
            m.content,
            m.type,
            list(m.tags),
            m.importance,
            dict(m.metadata_),
            m.event_time,
            m.status,
            m.pinned,
            m.session_id,
            m.source,
            m.external_id,
            key(m.replaced_by_id) if m.replaced_by_id is not None else None,
        )
        if m.content_hash != content_hash(m.content):
            problems.append(f"memory {m.id}: content_hash is not the hash of its content")
    edges = frozenset(
        (key(r.source_id), key(r.target_id), r.type, r.strength, r.description)
        for r in relations(db, namespace)
    )
    order = sorted((m for m in rows if m.status == ACTIVE), key=lambda m: (m.event_time, m.id))
    problems += timeline_problems(rows, [m.id for m in order])
    return Canon(
        memories=mems,
        relations=edges,
        timeline=tuple(key(m.id) for m in order),
        problems=tuple(problems),
    )


def timeline_problems(rows: Sequence[Memory], expected: Sequence[int]) -> list[str]:
    """Where the chain from the head through next_id differs from ``expected`` (the active
    memories in (event_time, id) order), or prev_id does not point back; [] if it does not."""
    active = {m.id: m for m in rows if m.status == ACTIVE}
    by_id = {m.id: m for m in rows}
    problems = [
        f"memory {m.id} ({m.status}) is linked into the timeline"
        f" (prev {m.prev_id}, next {m.next_id})"
        for m in rows
        if m.status != ACTIVE and (m.prev_id is not None or m.next_id is not None)
    ]
    heads = [m.id for m in active.values() if m.prev_id is None]
    if len(heads) != (1 if active else 0):
        problems.append(f"the timeline has heads {sorted(heads)}")
    start = heads[0] if len(heads) == 1 else (expected[0] if expected else None)
    current = active.get(start) if start is not None else None
    chain: list[int] = []
    seen: set[int] = set()
    while current is not None and current.id not in seen:
        seen.add(current.id)
        chain.append(current.id)
        nxt = by_id.get(current.next_id) if current.next_id is not None else None
        if nxt is not None and nxt.prev_id != current.id:
            problems.append(f"memory {nxt.id}: prev_id {nxt.prev_id}, not {current.id}")
        current = nxt
    if chain != list(expected):
        problems.append(
            f"timeline chain {chain} is not the (event_time, id) order {list(expected)}"
        )
    return problems


def differences(a: Canon, b: Canon, names: tuple[str, str] = ("store", "replay")) -> list[str]:
    """What differs between two canonical stores, in words ([] if they are equal)."""
    out: list[str] = []
    left, right = names
    for memory_key in sorted(a.memories.keys() | b.memories.keys(), key=str):
        x, y = a.memories.get(memory_key), b.memories.get(memory_key)
        if x is None:
            out.append(f"memory {memory_key}: only in the {right}: {y}")
        elif y is None:
            out.append(f"memory {memory_key}: only in the {left}: {x}")
        elif x != y:
            diffs = [
                f"{name} {left}={u!r} {right}={v!r}"
                for name, u, v in zip(MEMORY_FIELDS, x, y, strict=True)
                if u != v
            ]
            out.append(f"memory {memory_key}: " + "; ".join(diffs))
    for edge in sorted(a.relations - b.relations, key=str):
        out.append(f"relation only in the {left}: {edge}")
    for edge in sorted(b.relations - a.relations, key=str):
        out.append(f"relation only in the {right}: {edge}")
    if a.timeline != b.timeline:
        out.append(f"timeline {left}={list(a.timeline)} {right}={list(b.timeline)}")
    out += [f"{left}: {p}" for p in a.problems] + [f"{right}: {p}" for p in b.problems]
    return out


# -- the checks --------------------------------------------------------------------------------


@dataclass
class Check:
    """What undoing one record of a history did, and what was wrong with it."""

    record_id: int
    cascade: bool
    outcome: str = ""  # applied | refused | error
    exact: bool = False  # applied, equal to the replay, and undoing the undo restored it
    dependents: tuple[Any, ...] = ()
    cascaded: tuple[int, ...] = ()
    conflicts: tuple[Any, ...] = ()
    derived_only: int = 0  # conflicts whose every field is derived state
    problems: list[str] = field(default_factory=list)
    kind: str = ""  # the first problem's class: mismatch, missed, unnamed, ...
    after: Canon | None = None  # the store right after the undo, if it applied

    def fail(self, kind: str, message: str) -> None:
        self.kind = self.kind or kind
        self.problems.append(message)


def derived_only(conflict: Any) -> bool:
    fields = [getattr(d, "field", None) for d in getattr(conflict, "fields", ())]
    return bool(fields) and all(name in DERIVED_FIELDS for name in fields)


def pick_record(db: Database, history: History, pick: int) -> int | None:
    """A record of the history in force, by ``pick``; None if none is."""
    candidates = [r.id for r in records(db, history.namespace) if in_force(r)]
    return candidates[pick % len(candidates)] if candidates else None


def check_undo(
    db: Database, history: History, record_id: int, *, cascade: bool, replays: Iterator[str]
) -> Check:
    """Undo ``record_id`` (with or without cascade) and compare the store with the replay of
    the history without what was undone; then undo that undo and compare with the store before.

    Without cascade a refusal is right if it names dependents, each a later record in force.
    The undo and the undo of it are added to the history (the next check replays them).
    ``replays`` yields fresh namespaces for the replays.
    """
    check = Check(record_id=record_id, cascade=cascade)
    namespace = history.namespace
    before = canonical(db, namespace)
    rows = records(db, namespace)
    before_records = {r.id: in_force(r) for r in rows}
    undone_by = {r.id: r.undone_by_id for r in rows}
    now = history.now()
    try:
        result = run_undo(db, record_id, now=now, cascade=True if cascade else None)
    except UndoConflict as refused:
        check.outcome = "refused"
        check.conflicts = tuple(refused.conflicts)
        check.dependents = tuple(getattr(refused, "dependents", ()))
        check.derived_only = sum(derived_only(c) for c in check.conflicts)
        if check.derived_only:
            shown = "; ".join(c.describe() for c in check.conflicts if derived_only(c))
            check.fail("derived", f"conflicts on derived state only: {shown}")
        if cascade:
            check.fail("cascade refused", f"undo with cascade of record {record_id}: {refused}")
        elif not check.dependents:
            check.fail("unnamed", f"refused without naming dependents: {refused}")
        for dependent in check.dependents:
            rid = dependent.record_id
            if not (rid > record_id and before_records.get(rid)):
                check.fail(
                    "bad dependent",
                    f"dependent {dependent} is not a later record in force of the namespace",
                )
        after = canonical(db, namespace)
        if after != before:
            check.fail(
                "wrote",
                "a refused undo changed the store: "
                + "; ".join(differences(before, after, ("before", "after"))),
            )
        return check
    except Exception as exc:  # noqa: BLE001 - every other failure is a finding
        check.outcome = "error"
        check.fail(
            "error",
            f"undo of record {record_id} (cascade={cascade}) raised {type(exc).__name__}: {exc}",
        )
        return check
    check.outcome = "applied"
    check.cascaded = tuple(getattr(result, "cascaded", ()))
    history.add("check undo", Undo(record_id, cascade=cascade), result.record_id, now, result)
    for rid in check.cascaded:
        # A later record in force, or one that an undo the cascade takes back had undone (it
        # comes back in force with that, so it goes too).
        if not (
            rid > record_id and (before_records.get(rid) or undone_by.get(rid) in check.cascaded)
        ):
            check.fail(
                "bad dependent",
                f"cascaded to record {rid}, neither a later record in force nor one an undo"
                " it cascaded to had undone",
            )
    after = check.after = canonical(db, namespace)
    skipped = {record_id, *check.cascaded}
    try:
        # The undo just added to the history undid what is skipped: the replay skips it too.
        replayed = replay(db, history, skipped, next(replays))
    except ReplayError as missed:
        check.fail("missed", str(missed))
    else:
        expected = canonical(db, replayed.namespace, replayed.original_of())
        diffs = differences(after, expected, ("store", "replay"))
        if diffs:
            check.fail(
                "mismatch",
                f"after undoing record {record_id} (cascaded {list(check.cascaded)}), the store"
                " differs from the replay without them:\n  " + "\n  ".join(diffs),
            )
    # Undoing the undo puts everything back.
    again = history.now()
    try:
        redo = run_undo(db, result.record_id, now=again)
    except Exception as exc:  # noqa: BLE001
        check.fail(
            "redo", f"undo of the undo record {result.record_id} raised {type(exc).__name__}: {exc}"
        )
        return check
    history.add("check redo", Undo(result.record_id), redo.record_id, again, redo)
    restored = canonical(db, namespace)
    diffs = differences(before, restored, ("before", "after redo"))
    if diffs:
        check.fail(
            "redo",
            f"undoing the undo record {result.record_id} does not restore the store:\n  "
            + "\n  ".join(diffs),
        )
    back = {r.id: in_force(r) for r in records(db, namespace)}
    moved = [rid for rid, was in before_records.items() if back.get(rid) != was]
    if moved:
        check.fail(
            "redo",
            f"records {moved} are not in force as they were before the undo, after undoing it",
        )
    check.exact = not check.problems
    return check


def namespaces(prefix: str) -> Iterator[str]:
    return (f"{prefix}~{n}" for n in itertools.count(1))


@contextlib.contextmanager
def no_changes(db: Database, namespace: str) -> Iterator[None]:
    """Assert that the block leaves the namespace's canonical store as it was."""
    before = canonical(db, namespace)
    yield
    after = canonical(db, namespace)
    assert after == before, "\n".join(differences(before, after, ("before", "after")))
