"""Property: a selective undo leaves the store as the history would have left it without the
record (issue 25, item 3).

Random histories (ingests, a person's edits and deletes, job-like plans, undos and undos of
undos; see tests/helpers/histories.py) run in a namespace of their own; then a random record in
force is undone.

- Without cascade the undo either applies, and the store equals the replay of the history
  without the record, or it is refused naming dependents: later records in force.
- With cascade it applies, and the store equals the replay without the record and without the
  records it cascaded to.
- Undoing that undo gives back the store as it was before (user-visible fields).

The replay performs the same concrete actions in a fresh namespace with ids translated; stores
are compared field by field, relation by relation and along the timeline, never by ids,
versions or write times. Also here: the named histories of the issue, at store level.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from store.database import Database
from store.db import make_engine, upgrade
from store.kinds import MemoryStatus
from store.operations import CreateMemory, CreateRelation, InheritRelations, SetStatus, UpdateMemory
from store.schemas import MemoryIn
from store.vector.index import VectorIndex
from store.vector.indexer import Indexer
from store.write.undo import UndoConflict
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.histories import (
    MEMORY_FIELDS,
    PICK,
    STEP_NAMES,
    T0,
    ActionT,
    Check,
    Delete,
    Done,
    Edit,
    History,
    Ingest,
    Plan,
    Step,
    canonical,
    check_undo,
    differences,
    namespaces,
    perform,
    pick_record,
    replay,
    run_history,
    run_undo,
)

HOUR = timedelta(hours=1)
_namespaces = itertools.count()


@dataclass
class World:
    db: Database
    indexer: Indexer


def _world(engine: Engine, place: Path) -> Iterator[World]:
    db = Database(engine)
    index = VectorIndex.open(embedder=FakeEmbedder(), path=place / "chroma")
    yield World(db=db, indexer=Indexer(db=db, index=index))
    index.close()


@pytest.fixture(scope="module")
def sqlite_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    place = tmp_path_factory.mktemp("undo-replay")
    engine = make_engine(f"sqlite:///{place / 'store.db'}")
    upgrade(engine)
    yield from _world(engine, place)
    engine.dispose()


@pytest.fixture(scope="module")
def postgres_world(
    postgres_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """The session's throw-away PostgreSQL database (tests/conftest.py); every example works
    in a namespace of its own, so the other tests' truncations between tests do not matter."""
    yield from _world(postgres_engine, tmp_path_factory.mktemp("undo-replay-pg"))


# -- the property --------------------------------------------------------------------------------

pick = st.integers(min_value=0, max_value=PICK)
step = st.builds(Step, name=st.sampled_from(STEP_NAMES), a=pick, b=pick, c=pick)
histories = st.lists(step, min_size=1, max_size=10)


def report(history: History, check: Check) -> str:
    return (
        f"undo of record {check.record_id} (cascade={check.cascade}) in history:\n"
        f"{history.describe()}\nproblems:\n" + "\n".join(check.problems)
    )


def undo_one(world: World, seeded: bool, steps: list[Step], chosen: int, cascade: bool) -> None:
    db, namespace = world.db, f"u{next(_namespaces)}"
    history = run_history(db, namespace, steps, seeded=seeded)
    record_id = pick_record(db, history, chosen)
    if record_id is None:
        return
    check = check_undo(db, history, record_id, cascade=cascade, replays=namespaces(namespace))
    assert not check.problems, report(history, check)
    if not cascade and check.outcome == "refused":
        assert check.dependents, report(history, check)
    world.indexer.sync()
    assert world.indexer.verify(namespace).clean


def examples(count: int) -> settings:
    # The same examples every run: bench/undo_histories.py draws 2,000 fresh histories and
    # lists the ones that still fail (two known, see issue 25), which must not make CI flaky.
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


@examples(150)
@given(seeded=st.booleans(), steps=histories, chosen=pick)
def test_undo_equals_replay_without_it_or_names_dependents(
    sqlite_world: World, seeded: bool, steps: list[Step], chosen: int
) -> None:
    undo_one(sqlite_world, seeded, steps, chosen, cascade=False)


@examples(150)
@given(seeded=st.booleans(), steps=histories, chosen=pick)
def test_cascade_equals_replay_without_it_and_its_dependents(
    sqlite_world: World, seeded: bool, steps: list[Step], chosen: int
) -> None:
    undo_one(sqlite_world, seeded, steps, chosen, cascade=True)


@pytest.mark.postgres
@examples(15)
@given(seeded=st.booleans(), steps=histories, chosen=pick)
def test_undo_equals_replay_on_postgres(
    postgres_world: World, seeded: bool, steps: list[Step], chosen: int
) -> None:
    undo_one(postgres_world, seeded, steps, chosen, cascade=False)


@pytest.mark.postgres
@examples(15)
@given(seeded=st.booleans(), steps=histories, chosen=pick)
def test_cascade_equals_replay_on_postgres(
    postgres_world: World, seeded: bool, steps: list[Step], chosen: int
) -> None:
    undo_one(postgres_world, seeded, steps, chosen, cascade=True)


@examples(25)
@given(seeded=st.booleans(), steps=histories)
def test_replay_of_a_whole_history_equals_it(
    sqlite_world: World, seeded: bool, steps: list[Step]
) -> None:
    """The harness itself: replaying every record gives the same store."""
    db, namespace = sqlite_world.db, f"w{next(_namespaces)}"
    history = run_history(db, namespace, steps, seeded=seeded)
    copy = replay(db, history, set(), f"{namespace}~all")
    diffs = differences(canonical(db, namespace), canonical(db, copy.namespace, copy.original_of()))
    assert not diffs, history.describe() + "\n" + "\n".join(diffs)


# -- the named histories ---------------------------------------------------------------------------


def do(history: History, label: str, action: ActionT) -> Done:
    now = history.now()
    record_id, result = perform(history.db, history.namespace, action, now)
    assert record_id is not None, f"{label} recorded nothing"
    return history.add(label, action, record_id, now, result)


def fragments(count: int, *, type_: str = "event") -> Ingest:
    return Ingest(
        tuple(
            MemoryIn(
                content=f"fragment {i} about coffee",
                timestamp=T0 + i * HOUR,
                session_id="s",
                type=type_,
            )
            for i in range(count)
        )
    )


def assert_exact(history: History, check: Check) -> None:
    assert check.outcome == "applied", report(history, check)
    assert not check.problems, report(history, check)


@pytest.mark.parametrize("moved", [False, True], ids=["content", "content-and-time"])
def test_undo_of_an_edit_after_a_neighbours_delete_applies(db: Database, moved: bool) -> None:
    """(a) The delete relinks the edited memory's neighbours: derived state, no conflict."""
    history = History(db=db, namespace="ns")
    made = do(history, "ingest", fragments(3)).created
    changes: dict[str, Any] = {"content": "fragment 1, corrected"}
    if moved:  # after fragment 2: the timeline reads 0, 2, 1
        changes["event_time"] = T0 + 3 * HOUR
    edit = do(history, "edit", Edit(made[1], changes))
    do(history, "delete", Delete(made[2]))  # the edited memory's neighbour, either way
    check = check_undo(db, history, edit.record_id, cascade=False, replays=namespaces("ns"))
    assert_exact(history, check)


def test_undo_of_a_merge_keeps_a_later_soul_mapper_change(db: Database) -> None:
    """(b) The soul mapper changed the keeper's tags after the merge changed its content:
    undoing the merge restores the content and the merged memory, and keeps the tags."""
    history = History(db=db, namespace="ns")
    keeper, dup, other = do(history, "ingest", fragments(3, type_="preference")).created
    do(
        history,
        "linker",
        Plan("linker", (CreateRelation(source=dup, target=other, type="thematic", strength=0.4),)),
    )
    merge = do(
        history,
        "auditor",
        Plan(
            "auditor",
            (
                UpdateMemory(memory_id=keeper, changes={"content": "fragments 0 and 1, merged"}),
                InheritRelations(from_ids=(dup,), to=keeper),
                SetStatus(memory_id=dup, status=MemoryStatus.MERGED, replaced_by=keeper),
            ),
        ),
    )
    soul_tags = ["trait", "coffee"]
    do(
        history,
        "soul_mapper",
        Plan("soul_mapper", (UpdateMemory(memory_id=keeper, changes={"tags": soul_tags}),)),
    )
    check = check_undo(db, history, merge.record_id, cascade=False, replays=namespaces("ns"))
    assert_exact(history, check)
    assert check.after is not None
    content, _, tags, *_ = check.after.memories[keeper]
    assert (content, tags) == ("fragment 0 about coffee", soul_tags)
    assert check.after.memories[dup][MEMORY_FIELDS.index("status")] == MemoryStatus.ACTIVE
    assert not any(keeper in edge[:2] for edge in check.after.relations)


def test_undo_of_an_extraction_names_the_linker_and_cascades_to_it(db: Database) -> None:
    """(c) The linker related the extractor's memories: undoing the extractor alone is refused
    naming the linker's record; with cascade both go, as if neither had run."""
    history = History(db=db, namespace="ns")
    base = do(history, "ingest", fragments(2)).created
    extracted = do(
        history,
        "extractor",
        Plan(
            "extractor",
            tuple(
                CreateMemory(
                    key=f"m{i}",
                    content=f"extracted fact {i} about the garden",
                    type="fact",
                    event_time=T0 + (i + 5) * HOUR,
                    session_id="s",
                    source="extractor",
                )
                for i in range(2)
            ),
        ),
    ).created
    linker = do(
        history,
        "linker",
        Plan(
            "linker",
            (
                CreateRelation(
                    source=extracted[0], target=extracted[1], type="causal", strength=0.6
                ),
                CreateRelation(source=extracted[1], target=base[0], type="thematic", strength=0.3),
            ),
        ),
    )
    extractor_id = history.done[1].record_id
    before = canonical(db, "ns")
    with pytest.raises(UndoConflict) as refused:
        run_undo(db, extractor_id, now=history.now())
    assert [d.record_id for d in refused.value.dependents] == [linker.record_id]
    assert not differences(before, canonical(db, "ns"))
    check = check_undo(db, history, extractor_id, cascade=True, replays=namespaces("ns"))
    assert check.cascaded == (linker.record_id,), report(history, check)
    assert_exact(history, check)
