"""The operator's morning (issue 25): after a night of every job, any run undone, in any order.

A store of the sample companion's memories plus a day of conversation logs dreams once through
the CLI, litellm and a scripted model over HTTP that is slow at times, rate-limits (429 with
Retry-After) and sends ids it was not given. Then, on a fresh copy of that morning for each
run of the night, the operator undoes that run alone from the CLI: dry run first, then the
undo, or, when it is refused naming later runs, the cascade's dry run and the cascade. Finally
one copy undoes every run of the night in a shuffled order.

Each result is checked against the night replayed without the undone runs: the morning before
the dream, with every other run's recorded changes applied again field by field, in order
(created rows created, removed rows removed, changed fields set). Memories and relations are
compared by id on what a person sees; the timeline must be the chain of active memories by
event time; search must find the same memories.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from itertools import count, pairwise
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from secretary.config import load_settings
from store.db import session_factory
from store.images import memory_values, relation_values
from store.kinds import MemoryStatus
from store.models import MaintenanceOperation, MaintenanceRecord, Memory, MemoryRelation
from store.service import Store
from store.text import content_hash
from store.write.undo import NothingToUndo, plan_undo
from store.write.undo_conflicts import visible
from tests.helpers.cli import cli_in
from tests.helpers.openai_server import (
    CHAT_COMPLETIONS,
    ReceivedRequest,
    ScriptedOpenAIServer,
    ScriptedReply,
)
from tests.helpers.scripted_model import ScriptedModel

REPO = Path(__file__).resolve().parents[2]
NS = "default"
T0 = datetime(2026, 3, 3, 20, 0, tzinfo=UTC)


class SloppyModel(ScriptedModel):
    """The scripted model, but slow now and then, rate-limited every fifth call, and adding
    an id it was never sent to every linker and auditor answer (the jobs must drop it)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = count()

    def __call__(self, request: ReceivedRequest) -> ScriptedReply:
        n = next(self.calls)
        if n % 5 == 4:
            return ScriptedReply(
                status=429, body={"error": "slow down"}, headers={"Retry-After": "1"}
            )
        reply = super().__call__(request)
        body = reply.body
        message = json.loads(body["choices"][0]["message"]["content"])
        for key in ("relations", "decisions"):
            for item in message.get(key, [])[:1]:
                if isinstance(item, dict):
                    for name in ("source_id", "target_id", "keep_id"):
                        if name in item:
                            message[key].append({**item, name: 99_999})
                            break
        body["choices"][0]["message"]["content"] = json.dumps(message)
        return ScriptedReply(body=body, delay=0.3 if n % 3 == 0 else 0.0)


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[int]]:
    """(the store before the dream, the morning after it, the night's record ids)."""
    place = tmp_path_factory.mktemp("morning")
    before, morning = place / "before", place / "morning"
    with pytest.MonkeyPatch.context() as patch, ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, SloppyModel())
        for name, value in {
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }.items():
            patch.setenv(name, value)
        run = cli_in(before, patch)
        run("init")
        run("ingest", str(REPO / "samples" / "companion.jsonl"))
        logs = place / "logs.jsonl"
        lines = [
            "I always drink oolong after my runs now.",
            "My knee hurt again on the long run, so I saw the physio.",
            "Tom and I booked the train to Lisbon for the race.",
            "I prefer running with music, podcasts bore me.",
            "The physio said to rest the knee for a week.",
            "I switched jobs: I work at the children's clinic now.",
        ]
        logs.write_text(
            "".join(
                json.dumps(
                    {
                        "session_id": "evening",
                        "role": "user",
                        "content": text,
                        "timestamp": (T0 + timedelta(minutes=5 * i)).isoformat(),
                        "idempotency_key": f"evening-{i}",
                    }
                )
                + "\n"
                for i, text in enumerate(lines)
            )
        )
        run("ingest", "--logs", str(logs))
        shutil.copytree(before, morning)
        first = _newest_record(morning) + 1
        run = cli_in(morning, patch)
        dreamt = run("dream").output
        records = [r for r in _records(morning) if r >= first]
    # Every record the dream wrote is named in what it printed.
    assert all(f"#{r}" in dreamt for r in records), dreamt
    jobs = {job for _, job in _jobs(morning, records)}
    assert {"extractor", "linker", "auditor", "soul_mapper", "consolidator"} <= jobs, dreamt
    return before, morning, records


def _store(data_dir: Path) -> Store:
    return Store.open(load_settings(None, {}, data_dir=data_dir))


def _newest_record(data_dir: Path) -> int:
    return max(_records(data_dir), default=0)


def _records(data_dir: Path) -> list[int]:
    store = _store(data_dir)
    try:
        with session_factory(store.db.engine)() as session:
            return list(
                session.scalars(select(MaintenanceRecord.id).order_by(MaintenanceRecord.id))
            )
    finally:
        store.close()


def _jobs(data_dir: Path, ids: list[int]) -> list[tuple[int, str]]:
    store = _store(data_dir)
    try:
        return [(i, store.db.records.get(i)[0].job) for i in ids]
    finally:
        store.close()


# -- the replay: the night's recorded changes again, without some runs --------------------------


def replay(before: Path, morning: Path, night: list[int], without: set[int], into: Path) -> Path:
    """Apply, in order, the field-level changes of the night's records not in ``without``
    (read from the morning's records) to a copy of the store before the dream."""
    shutil.copytree(before, into)
    source, target = _store(morning), _store(into)
    try:
        with session_factory(source.db.engine)() as read:
            ops = read.scalars(
                select(MaintenanceOperation)
                .where(MaintenanceOperation.record_id.in_([r for r in night if r not in without]))
                .order_by(MaintenanceOperation.record_id, MaintenanceOperation.seq)
            ).all()
            changes = [(op.target_kind, op.target_id, op.before, op.after) for op in ops]
        with session_factory(target.db.engine)() as write, write.begin():
            # A record's rows may name one it creates later in its own order (a summary's
            # fragments are taken off the timeline first): keys are checked at commit.
            write.execute(text("PRAGMA defer_foreign_keys = ON"))
            for kind, row_id, was, now in changes:
                _patch(write, kind, row_id, was, now)
            _link_timeline(write)
    finally:
        source.close()
        target.close()
    # Rows written behind the store's back: the lexical index is built anew from SQL.
    shutil.rmtree(into / "lexical", ignore_errors=True)
    return into


def _link_timeline(session: Any) -> None:
    """Derive the timeline as the store does: the active memories chained by event time."""
    rows = session.scalars(select(Memory).where(Memory.namespace == NS)).all()
    for row in rows:
        row.prev_id = row.next_id = None
    active = sorted(
        (m for m in rows if m.status == MemoryStatus.ACTIVE), key=lambda m: (m.event_time, m.id)
    )
    for left, right in pairwise(active):
        left.next_id, right.prev_id = right.id, left.id
    session.flush()


def _patch(session: Any, kind: str, row_id: int, was: Mapping[str, Any] | None, now: Any) -> None:
    model = {"memory": Memory, "relation": MemoryRelation}.get(kind)
    if model is None:
        return  # log lines: the night's jobs do not change them
    if was is None:
        values = memory_values(now) if kind == "memory" else relation_values(now)
        values.update({"prev_id": None, "next_id": None} if kind == "memory" else {})
        session.add(model(**values))
    elif now is None:
        session.delete(session.get(model, row_id))
    else:
        row = session.get(model, row_id)
        values = memory_values(now) if kind == "memory" else relation_values(now)
        attrs = {"metadata": "metadata_"}
        for name, value in visible(now).items():
            if visible(was).get(name) != value:
                setattr(row, attrs.get(name, name), values[attrs.get(name, name)])
        if kind == "memory":
            row.content_hash = content_hash(row.content)
    session.flush()


# -- what a person sees ----------------------------------------------------------------------


def seen(data_dir: Path, *, replayed: bool = False) -> dict[str, Any]:
    """What a person sees; the timeline as the active memories by event time, which must be
    the chain the store links (a replay derives its links once, in one step)."""
    store = _store(data_dir)
    try:
        with session_factory(store.db.engine)() as session:
            memories = session.scalars(select(Memory).where(Memory.namespace == NS)).all()
            relations = session.scalars(select(MemoryRelation)).all()
            shown = {
                m.id: {
                    "content": m.content,
                    "type": m.type,
                    "tags": sorted(m.tags),
                    "importance": m.importance,
                    "metadata": m.metadata_,
                    "event_time": m.event_time.isoformat(),
                    "status": m.status,
                    "pinned": m.pinned,
                    "replaced_by": m.replaced_by_id,
                }
                for m in memories
            }
            edges = {
                r.id: (r.source_id, r.target_id, r.type, r.strength, r.description)
                for r in relations
            }
            active = [m for m in memories if m.status == MemoryStatus.ACTIVE]
            by_time = [m.id for m in sorted(active, key=lambda m: (m.event_time, m.id))]
            if not replayed:
                chain = _chain(active)
                assert chain == by_time, "the timeline is not the chain of active memories by time"
        found = {
            query: [hit.memory.id for hit in store.searcher.search(_query(query), now=T0).hits]
            for query in ("knee physio", "Lisbon race train", "oolong tea")
        }
        return {"memories": shown, "relations": edges, "timeline": by_time, "search": found}
    finally:
        store.close()


def _chain(active: list[Memory]) -> list[int]:
    by_id = {m.id: m for m in active}
    heads = [m for m in active if m.prev_id is None]
    assert len(heads) <= 1, f"the timeline has {len(heads)} heads"
    order: list[int] = []
    here = heads[0] if heads else None
    while here is not None:
        order.append(here.id)
        here = by_id.get(here.next_id) if here.next_id is not None else None
        assert len(order) <= len(active), "the timeline has a loop"
    return order


def refused(data_dir: Path, record_id: int) -> bool:
    """Whether the store would refuse to undo the record, read without the CLI (the dry run's
    exit code is checked against it)."""
    store = _store(data_dir)
    try:
        return bool(plan_undo(store.db.writer, record_id).conflicts)
    except NothingToUndo:
        return False
    finally:
        store.close()


def undo_as_the_operator(data_dir: Path, record_id: int, patch: pytest.MonkeyPatch) -> set[int]:
    """Dry run, then undo; if refused naming later runs, the cascade's dry run, then the
    cascade. Return every record undone."""
    run = cli_in(data_dir, patch)
    before = seen(data_dir)
    refusing = refused(data_dir, record_id)
    dry = run("undo", str(record_id), "--dry-run", code=1 if refusing else 0).output
    if dry.startswith("nothing to undo: "):  # a run that changed nothing: exit 0, no record
        assert "undone by record" not in run("undo", str(record_id)).output
        assert seen(data_dir) == before
        return set()
    assert "dry run: nothing written" in dry
    assert seen(data_dir) == before
    assert ("later records it depends on" in dry) is refusing
    if not refusing:  # the dry run's exit code said it: 0, the undo applies
        done = run("undo", str(record_id)).output
        assert f"record {record_id} undone by record" in done, done
        return {record_id}
    assert dry.endswith("this undo would be refused\n")
    refusal = run("undo", str(record_id), code=1).stderr
    assert "later records depend on it" in refusal
    assert "--cascade" in refusal
    planned = run("undo", str(record_id), "--cascade", "--dry-run").output
    assert seen(data_dir) == before
    cascaded = run("undo", str(record_id), "--cascade").output
    assert "(--cascade) undone by record" in cascaded, cascaded
    ids = cascaded.split(" with ")[1].split(" (--cascade)")[0]
    undone = {record_id, *(int(i.strip().lstrip("#")) for i in ids.split(","))}
    assert all(f"#{i}" in planned for i in undone)
    return undone


def _query(text: str) -> Any:
    from store.requests import SearchRequest

    return SearchRequest(namespace=NS, query=text, k=5, reinforce=False)


def rebuilt(data_dir: Path, patch: pytest.MonkeyPatch) -> Path:
    """The store with its indexes rebuilt from SQL (a replay writes rows, not index entries)."""
    cli_in(data_dir, patch)("index", "rebuild")
    return data_dir


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_each_run_of_the_night_undone_alone_equals_the_night_without_it(
    night: tuple[Path, Path, list[int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, morning, records = night
    for record_id in records:
        copy = tmp_path / f"undo-{record_id}"
        shutil.copytree(morning, copy)
        undone = undo_as_the_operator(copy, record_id, monkeypatch)
        if not undone:
            continue  # a run that changed nothing (said "nothing to undo", exit 0)
        expected = rebuilt(
            replay(before, morning, records, undone, tmp_path / f"replay-{record_id}"), monkeypatch
        )
        assert seen(copy) == seen(expected, replayed=True), (
            f"undoing #{record_id} (with {sorted(undone)})"
        )


@pytest.mark.slow
def test_every_run_of_the_night_undone_in_a_shuffled_order(
    night: tuple[Path, Path, list[int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, morning, records = night
    copy = tmp_path / "shuffled"
    shutil.copytree(morning, copy)
    order = list(records)
    random.Random(25).shuffle(order)
    undone: set[int] = set()
    for record_id in order:
        if record_id in undone:
            continue  # a cascade took it back already
        undone |= undo_as_the_operator(copy, record_id, monkeypatch)
        expected = rebuilt(
            replay(before, morning, records, undone, tmp_path / f"r{len(undone)}-{record_id}"),
            monkeypatch,
        )
        assert seen(copy) == seen(expected, replayed=True), (
            f"after undoing {sorted(undone)} (order {order})"
        )
