"""Property: after any runs and undos, undoing what is in force, newest first, restores the start.

Retention's purge is not among the actions: it keeps no image of what it purges, so it is final
by design (tests/store/write/test_undo.py shows the refusal). A person's edits and deletes are.

SQLite only, for speed; every example works in a namespace of its own, so one database and one
embedded Chroma serve them all.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.database import Database
from store.db import make_engine, upgrade
from store.kinds import MemoryStatus
from store.models import Memory
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    SetStatus,
    UpdateMemory,
)
from store.schemas import MemoryIn
from store.vector.index import VectorIndex
from store.vector.indexer import Indexer
from store.write import edits
from store.write.undo import AlreadyUndone, NothingToUndo, UndoConflict, undo
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.histories import memories, records

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_namespaces = itertools.count()


@dataclass
class World:
    db: Database
    indexer: Indexer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    place: Path = tmp_path_factory.mktemp("undo-property")
    engine = make_engine(f"sqlite:///{place / 'store.db'}")
    upgrade(engine)
    db = Database(engine)
    index = VectorIndex.open(embedder=FakeEmbedder(), path=place / "chroma")
    yield World(db=db, indexer=Indexer(db=db, index=index))
    index.close()
    engine.dispose()


# -- actions, interpreted against the namespace as it is when they run ---------------------------


@dataclass(frozen=True, kw_only=True)
class Action:
    name: str
    first: int = 0  # selectors: taken modulo the number of candidates there are then
    second: int = 0
    minutes: tuple[int, ...] = ()  # event times of an ingest batch, in minutes after T0
    status: MemoryStatus = MemoryStatus.ARCHIVED


pick = st.integers(min_value=0, max_value=1000)
actions = st.one_of(
    st.builds(
        Action,
        name=st.just("ingest"),
        minutes=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=3).map(tuple),
    ),
    st.builds(
        Action,
        name=st.just("status"),
        first=pick,
        status=st.sampled_from(
            [MemoryStatus.ARCHIVED, MemoryStatus.SUPERSEDED, MemoryStatus.ACTIVE]
        ),
    ),
    st.builds(Action, name=st.just("consolidate"), first=pick, second=st.integers(2, 3)),
    st.builds(Action, name=st.just("relate"), first=pick, second=pick),
    st.builds(Action, name=st.just("update"), first=pick),
    st.builds(Action, name=st.just("edit"), first=pick, second=pick),
    st.builds(Action, name=st.just("delete"), first=pick),
    st.builds(Action, name=st.just("undo"), first=pick),
)


def operations_for(action: Action, rows: list[Memory]) -> list[Operation]:
    """Turn a drawn action into plan operations on the rows there are (maybe none)."""
    on_timeline = [m for m in rows if m.status != MemoryStatus.MERGED]
    if action.name == "status" and on_timeline:
        target = on_timeline[action.first % len(on_timeline)]
        return [SetStatus(memory_id=target.id, status=action.status)]
    if action.name == "update" and rows:
        target = rows[action.first % len(rows)]
        return [UpdateMemory(memory_id=target.id, changes={"content": f"{target.content}+"})]
    if action.name == "relate" and len(rows) > 1:
        source, target = rows[action.first % len(rows)], rows[action.second % len(rows)]
        return [CreateRelation(source=source.id, target=target.id, type="causal", strength=0.5)]
    if action.name == "consolidate" and len(on_timeline) >= 2:
        return consolidation(on_timeline, action.first, action.second)
    return []


def consolidation(rows: list[Memory], first: int, size: int) -> list[Operation]:
    start = first % (len(rows) - 1)
    group = tuple(m.id for m in rows[start : start + size])
    return [
        CreateMemory(
            key="s",
            content="summary of " + ", ".join(map(str, group)),
            type="interaction_summary",
            event_time=rows[start].event_time,
            replaces_in_timeline=group,
        ),
        InheritRelations(from_ids=group, to="s"),
        *[CreateRelation(source="s", target=g, type="derived_from", strength=1.0) for g in group],
        *[SetStatus(memory_id=g, status=MemoryStatus.MERGED, replaced_by="s") for g in group],
    ]


def perform(db: Database, namespace: str, action: Action, now: datetime) -> None:
    if action.name == "ingest":
        items = [
            MemoryIn(content=f"event at {m}", timestamp=T0 + timedelta(minutes=m), session_id="s")
            for m in action.minutes
        ]
        db.writer.add_memories(namespace, items, now=now)
    elif action.name in ("edit", "delete"):
        active = [m for m in memories(db, namespace) if m.status == MemoryStatus.ACTIVE]
        if not active:
            return
        target = active[action.first % len(active)]
        if action.name == "delete":
            edits.delete(db.writer, namespace, target.id, now=now)
        else:  # a new text and a new place in the timeline
            moved = T0 + timedelta(minutes=action.second % 60)
            changes = {"content": f"{target.content}!", "event_time": moved}
            edits.edit(db.writer, namespace, target.id, changes, now=now)
    elif action.name == "undo":
        done = records(db, namespace)
        if done:
            # A refused undo writes nothing: the final walk checks that too.
            with contextlib.suppress(UndoConflict, AlreadyUndone, NothingToUndo):
                undo(db.writer, done[action.first % len(done)].id, now=now)
    else:
        ops = operations_for(action, memories(db, namespace))
        if ops:
            db.writer.apply(namespace, action.name, ops, now=now)


def undo_everything_in_force(db: Database, namespace: str, after: int, now: datetime) -> None:
    """Undo records newer than ``after``, newest first, re-reading each: undoing an undo puts
    an older record back in force, and the walk down reaches it next."""
    for record in reversed(records(db, namespace)):
        if record.id <= after:
            break
        current, _ = db.records.get(record.id)
        if current.undone_by_id is None:
            undo(db.writer, record.id, now=now)


@settings(max_examples=25, deadline=None)
@given(seeded=st.booleans(), steps=st.lists(actions, min_size=1, max_size=10))
def test_undo_all_in_reverse_any_history_restores_start(
    world: World, seeded: bool, steps: list[Action]
) -> None:
    db, namespace = world.db, f"p{next(_namespaces)}"
    if seeded:
        perform(db, namespace, Action(name="ingest", minutes=(5, 15, 25)), T0)
    start = list(db.memories.export(namespace))
    seed_records = records(db, namespace)
    after = seed_records[-1].id if seed_records else 0
    clock = (T0 + timedelta(hours=n) for n in itertools.count(1))
    for action in steps:
        perform(db, namespace, action, next(clock))
    undo_everything_in_force(db, namespace, after, next(clock))
    assert list(db.memories.export(namespace)) == start
    world.indexer.sync()
    assert world.indexer.verify(namespace).clean
