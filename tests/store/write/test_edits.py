"""A person's corrections in the store: edit, delete and forget, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, func, select

from store.database import Database
from store.db import session_factory
from store.errors import NotFound, ValidationFailed
from store.kinds import MemoryStatus
from store.models import ConversationLog, IndexOutbox, MaintenanceOperation, MaintenanceRecord
from store.operations import CreateMemory, CreateRelation, SetStatus, UpdateMemory
from store.requests import SearchFilters
from store.schemas import LogIn, MemoryIn
from store.write import edits, forget
from store.write.forget import ForgetSelection
from store.write.undo import ForgetIsFinal, undo
from tests.helpers.timeline import timeline

NOW = datetime(2026, 5, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
SECRET = "Maya's sister Ines lives at 14 Rua das Flores in Porto"


def seed(db: Database, texts: list[str], namespace: str = "ns") -> tuple[int, ...]:
    items = [
        MemoryIn(content=text, timestamp=NOW + i * HOUR, session_id="s", external_id=f"e{i}")
        for i, text in enumerate(texts)
    ]
    return db.writer.add_memories(namespace, items, now=NOW).ids


def stored_text(db: Database, *, logs: bool = True) -> str:
    """Every string the database holds in memories, records and (if asked) logs, as one text."""
    with session_factory(db.engine)() as session:
        records = session.scalars(select(MaintenanceRecord)).all()
        operations = session.scalars(select(MaintenanceOperation)).all()
        lines = session.scalars(select(ConversationLog.content)).all() if logs else []
        memories = db.memories.export("ns")
        return json.dumps(
            [
                list(memories),
                list(lines),
                [(r.stats, r.error) for r in records],
                [(o.before, o.after) for o in operations],
            ],
            default=str,
        )


# -- edit ------------------------------------------------------------------------------------


def test_edit_changes_fields_in_a_record_of_its_own_and_undo_reverses_it(db: Database) -> None:
    ids = seed(db, ["likes green tea", "walked the dog", "bought a bike"])
    before = list(db.memories.export("ns"))
    done = edits.edit(
        db.writer,
        "ns",
        ids[0],
        {"content": "likes black tea", "tags": ["drinks"], "importance": 8, "pinned": True},
        now=NOW + HOUR,
        by="cli",
    )
    memory = db.memories.get("ns", ids[0])
    assert memory is not None
    assert (memory.content, memory.tags, memory.importance, memory.pinned) == (
        "likes black tea",
        ("drinks",),
        8,
        True,
    )
    assert memory.version == done.version == 2
    # The score's base moves with the importance.
    assert memory.base_importance == pytest.approx(8.0)
    record, operations = db.records.get(done.record_id)  # type: ignore[arg-type]
    assert (record.job, record.stats["by"]) == ("edit", "cli")
    assert [(op.before or {}).get("content") for op in operations] == ["likes green tea"]
    assert done.record_id in [r.id for r in db.records.history("ns", ids[0])]
    with session_factory(db.engine)() as session:  # re-indexed through the outbox
        queued = session.scalars(select(IndexOutbox.memory_id)).all()
    assert ids[0] in queued

    undo(db.writer, done.record_id, now=NOW + 2 * HOUR)  # type: ignore[arg-type]
    assert list(db.memories.export("ns")) == before


def test_edit_of_event_time_moves_the_memory_in_the_timeline(db: Database) -> None:
    ids = seed(db, ["first", "second", "third"])
    done = edits.edit(db.writer, "ns", ids[0], {"event_time": NOW + 5 * HOUR}, now=NOW)
    assert timeline(db, "ns") == [ids[1], ids[2], ids[0]]
    undo(db.writer, done.record_id, now=NOW + HOUR)  # type: ignore[arg-type]
    assert timeline(db, "ns") == list(ids)


def test_edit_refuses_a_stale_version_and_writes_nothing(db: Database) -> None:
    (memory_id,) = seed(db, ["likes green tea"])
    edits.edit(db.writer, "ns", memory_id, {"content": "likes tea"}, now=NOW, expected_version=1)
    records = len(db.records.find())
    with pytest.raises(edits.VersionConflict, match="version 2, not 1"):
        edits.edit(
            db.writer, "ns", memory_id, {"content": "likes coffee"}, now=NOW, expected_version=1
        )
    memory = db.memories.get("ns", memory_id)
    assert memory is not None
    assert (memory.content, memory.version) == ("likes tea", 2)
    assert len(db.records.find()) == records


def test_edit_refuses_what_is_not_active_or_not_editable_or_elsewhere(db: Database) -> None:
    ids = seed(db, ["one", "two"])
    seed(db, ["another's"], namespace="other")
    db.writer.apply(
        "ns", "auditor", [SetStatus(memory_id=ids[0], status=MemoryStatus.ARCHIVED)], now=NOW
    )
    with pytest.raises(edits.NotActive, match="archived"):
        edits.edit(db.writer, "ns", ids[0], {"content": "x"}, now=NOW)
    with pytest.raises(ValidationFailed):
        edits.edit(db.writer, "ns", ids[1], {"status": "active"}, now=NOW)
    with pytest.raises(NotFound):
        edits.edit(db.writer, "other", ids[1], {"content": "x"}, now=NOW)


def test_an_edit_that_changes_nothing_leaves_no_record(db: Database) -> None:
    (memory_id,) = seed(db, ["same"])
    records = len(db.records.find())
    done = edits.edit(db.writer, "ns", memory_id, {"content": "same"}, now=NOW)
    assert done.record_id is None
    assert len(db.records.find()) == records


# -- delete ----------------------------------------------------------------------------------


def test_delete_makes_a_tombstone_off_the_timeline_and_undo_brings_it_back(db: Database) -> None:
    ids = seed(db, ["first", "second", "third"])
    before = list(db.memories.export("ns"))
    done = edits.delete(db.writer, "ns", ids[1], now=NOW, by="api:agent")
    memory = db.memories.get("ns", ids[1])
    assert memory is not None
    assert memory.status == "deleted"
    assert timeline(db, "ns") == [ids[0], ids[2]]
    assert db.memories.count("ns") == 2
    with pytest.raises(edits.NotActive, match="deleted"):
        edits.delete(db.writer, "ns", ids[1], now=NOW)

    undo(db.writer, done.record_id, now=NOW + HOUR)  # type: ignore[arg-type]
    assert list(db.memories.export("ns")) == before
    assert timeline(db, "ns") == list(ids)


def test_delete_with_a_stale_version_is_refused(db: Database) -> None:
    (memory_id,) = seed(db, ["one"])
    edits.edit(db.writer, "ns", memory_id, {"tags": ["x"]}, now=NOW)
    with pytest.raises(edits.VersionConflict):
        edits.delete(db.writer, "ns", memory_id, now=NOW, expected_version=1)
    memory = db.memories.get("ns", memory_id)
    assert memory is not None
    assert memory.status == "active"


# -- forget ----------------------------------------------------------------------------------


def test_forget_erases_the_content_everywhere_and_keeps_an_erasure_record(db: Database) -> None:
    ids = seed(db, [SECRET, "walked the dog", "bought a bike"])
    db.writer.add_logs(
        "ns", [LogIn(session_id="s", role="user", content=SECRET, timestamp=NOW)], now=NOW
    )
    # The secret travels: an edit's images, a relation, a label quoting it, a summary of it.
    edits.edit(db.writer, "ns", ids[0], {"tags": ["family"]}, now=NOW)
    db.writer.apply(
        "ns",
        "linker",
        [CreateRelation(source=ids[0], target=ids[1], type="causal", strength=0.5)],
        now=NOW,
    )
    summary = db.writer.apply(
        "ns",
        "consolidator",
        [
            CreateMemory(key="s", content=f"Summary: {SECRET}.", type="summary", event_time=NOW),
            CreateRelation(source="s", target=ids[0], type="derived_from", strength=1.0),
        ],
        now=NOW,
    )
    with session_factory(db.engine, write=True)() as session, session.begin():
        record = session.get(MaintenanceRecord, summary.record_id)
        assert record is not None
        record.stats = {**record.stats, "label": SECRET[:60]}
    assert SECRET[:30] in stored_text(db)

    result = edits.forget(
        db.writer, "ns", ForgetSelection(ids=(ids[0],), logs=False), now=NOW, by="cli"
    )

    text = stored_text(db, logs=False)  # the log line was not asked for (below)
    assert SECRET[:24] not in text
    assert "Ines" not in text
    gone = {m.id: m.why for m in result.plan.memories}
    summary_id = max(gone)
    assert gone == {ids[0]: "asked", summary_id: f"derived from #{ids[0]}"}
    assert db.memories.get("ns", ids[0]) is None
    assert db.memories.get("ns", summary_id) is None
    assert timeline(db, "ns") == [ids[1], ids[2]]
    record, _ = db.records.get(result.record_id)  # type: ignore[arg-type]
    assert record.job == "forget"
    assert record.stats["by"] == "cli"
    assert [m["id"] for m in record.stats["memories"]] == sorted(gone)
    assert all(len(m["content_hash"]) == 64 for m in record.stats["memories"])
    # The log line stays: it was not asked for.
    with session_factory(db.engine)() as session:
        assert session.scalar(select(func.count()).select_from(ConversationLog)) == 1
    with pytest.raises(ForgetIsFinal, match="nothing can bring it back"):
        undo(db.writer, result.record_id, now=NOW + HOUR)  # type: ignore[arg-type]
    # The vector index is told to drop them.
    with session_factory(db.engine)() as session:
        drops = session.scalars(
            select(IndexOutbox.memory_id).where(IndexOutbox.action == "delete")
        ).all()
    assert set(gone) <= set(drops)


def _images(db: Database) -> dict[int, tuple[object, object]]:
    with session_factory(db.engine)() as session:
        return {
            op.id: (op.before, op.after) for op in session.scalars(select(MaintenanceOperation))
        }


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def test_forget_scrubs_every_page_of_images_whatever_json_escapes(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Accents, quotes, a backslash and a newline: JSON writes each of them escaped.
    secret = 'Zoë said "the café key" is in C:\\keys\\zoë\nunder the señor\'s mat'
    ids = seed(db, [secret, "walked the dog", "bought a bike"])
    quoting = f"she told me: {secret[4:40]}!"
    edits.edit(db.writer, "ns", ids[1], {"content": quoting}, now=NOW)
    before = _images(db)
    monkeypatch.setattr(forget, "REWRITE_PAGE", 2)  # the images are read in several pages

    edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[0],)), now=NOW)

    # Only the images made before the forget: its own record holds the quoting memory's text
    # as the live memory still does (a forget leaves other memories' text alone).
    after = {op_id: images for op_id, images in _images(db).items() if op_id in before}
    changed = {op_id for op_id in before if after[op_id] != before[op_id]}
    strings = [s for images in after.values() for s in _strings(images)]
    assert not [s for s in strings if secret[10:34] in s or "Zoë said" in s]
    assert "[forgotten]" in strings  # the edit's image of the quoting memory
    assert "walked the dog" in strings  # ... keeps what it held before the edit
    # Only the forgotten memory's images and the quoting one changed; the others are as they were.
    with session_factory(db.engine)() as session:
        targets = dict(
            session.execute(select(MaintenanceOperation.id, MaintenanceOperation.target_id)).all()
        )
    assert {targets[op_id] for op_id in changed} == {ids[0], ids[1]}
    assert all(after[op_id] == before[op_id] for op_id in before if targets[op_id] == ids[2])


def test_forget_pages_hold_every_operation_of_the_namespace_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forget, "REWRITE_PAGE", 2)
    # Records of one, one, five and one new memories (and their timeline links), another
    # namespace's in between, and a gap in the big record's positions (as if a row had gone).
    for texts, namespace in [
        (["a"], "ns"), (["b"], "ns"), (["x", "y"], "other"), (["c", "d", "e", "f", "g"], "ns"),
        (["h"], "ns"),
    ]:  # fmt: skip
        items = [MemoryIn(content=text, timestamp=NOW, external_id=text) for text in texts]
        db.writer.add_memories(namespace, items, now=NOW)
    op = MaintenanceOperation
    with session_factory(db.engine)() as session:
        big = session.scalar(
            select(op.record_id).group_by(op.record_id).order_by(func.count().desc()).limit(1)
        )
        assert session.scalar(select(func.count()).where(op.record_id == big)) >= 5
        session.execute(delete(op).where(op.record_id == big, op.seq == 1))
        session.commit()
        wanted = set(
            session.scalars(
                select(op.id).join(MaintenanceRecord).where(MaintenanceRecord.namespace == "ns")
            )
        )
        pages = [
            list(session.scalars(select(op.id).where(page)))
            for page in forget._pages(session, "ns")
        ]
    read = [op_id for page in pages for op_id in page]
    assert sorted(read) == sorted(wanted)  # each once, none of the other namespace
    assert all(len(page) <= 2 for page in pages)


def test_forget_with_logs_takes_the_lines_the_memory_came_from(db: Database) -> None:
    lines = db.writer.add_logs(
        "ns",
        [
            LogIn(session_id="s", role="user", content=SECRET, timestamp=NOW),
            LogIn(session_id="s", role="user", content="unrelated", timestamp=NOW),
        ],
        now=NOW,
    ).ids
    made = db.writer.apply(
        "ns",
        "extractor",
        [
            CreateMemory(
                key="m",
                content=SECRET,
                type="fact",
                event_time=NOW,
                metadata={"source_log_ids": [lines[0]]},
            )
        ],
        now=NOW,
    )
    _, operations = db.records.get(made.record_id)  # type: ignore[arg-type]
    memory_id = operations[0].target_id
    edits.forget(db.writer, "ns", ForgetSelection(ids=(memory_id,), logs=True), now=NOW)
    with session_factory(db.engine)() as session:
        left = session.scalars(select(ConversationLog.content)).all()
    assert left == ["unrelated"]
    assert "Ines" not in stored_text(db)


def test_forget_follows_merges_both_ways_but_not_what_superseded_it(db: Database) -> None:
    ids = seed(db, ["likes tea", "likes tea!", "likes coffee now", "other"])
    db.writer.apply(
        "ns",
        "auditor",
        [
            SetStatus(memory_id=ids[1], status=MemoryStatus.MERGED, replaced_by=ids[0]),
            SetStatus(memory_id=ids[0], status=MemoryStatus.SUPERSEDED, replaced_by=ids[2]),
        ],
        now=NOW,
    )
    result = edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[0],)), now=NOW)
    assert {m.id for m in result.plan.memories} == {ids[0], ids[1]}
    newer = db.memories.get("ns", ids[2])
    assert newer is not None
    assert newer.status == "active"


def test_forget_by_external_id_filter_or_namespace(db: Database) -> None:
    ids = seed(db, ["a", "b", "c"])
    seed(db, ["kept elsewhere"], namespace="other")
    edits.edit(db.writer, "ns", ids[1], {"tags": ["health"]}, now=NOW)
    by_external = edits.forget(db.writer, "ns", ForgetSelection(external_ids=("e0",)), now=NOW)
    assert [m.id for m in by_external.plan.memories] == [ids[0]]
    by_tag = ForgetSelection(filters=SearchFilters(tags=("health",)))
    assert [m.id for m in edits.forget(db.writer, "ns", by_tag, now=NOW).plan.memories] == [ids[1]]
    everything = edits.forget(db.writer, "ns", ForgetSelection(everything=True), now=NOW)
    assert [m.id for m in everything.plan.memories] == [ids[2]]
    assert db.memories.count("ns", active_only=False) == 0
    assert db.memories.count("other") == 1


def test_forget_refuses_an_empty_selection_and_ids_of_another_namespace(db: Database) -> None:
    seed(db, ["a"])
    (theirs,) = seed(db, ["theirs"], namespace="other")
    records = len(db.records.find())
    with pytest.raises(ValidationFailed):
        edits.forget(db.writer, "ns", ForgetSelection(), now=NOW)
    with pytest.raises(ValidationFailed):  # a filter that restricts nothing names nothing
        edits.forget(db.writer, "ns", ForgetSelection(filters=SearchFilters()), now=NOW)
    with pytest.raises(NotFound):
        edits.forget(db.writer, "ns", ForgetSelection(ids=(theirs,)), now=NOW)
    with pytest.raises(NotFound):
        edits.forget(db.writer, "ns", ForgetSelection(external_ids=("nope",)), now=NOW)
    assert db.memories.get("other", theirs) is not None
    assert len(db.records.find()) == records


def test_forget_dry_run_lists_and_changes_nothing(db: Database) -> None:
    ids = seed(db, [SECRET, "b"])
    before, records = list(db.memories.export("ns")), len(db.records.find())
    result = edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[0],)), now=NOW, dry_run=True)
    assert result.record_id is None
    assert [m.id for m in result.plan.memories] == [ids[0]]
    assert list(db.memories.export("ns")) == before
    assert len(db.records.find()) == records


def test_forget_then_undo_of_an_earlier_record_is_refused_without_harm(db: Database) -> None:
    ids = seed(db, ["one", "two"])
    updated = db.writer.apply(
        "ns", "auditor", [UpdateMemory(memory_id=ids[0], changes={"content": "one!"})], now=NOW
    )
    edits.forget(db.writer, "ns", ForgetSelection(ids=(ids[0],)), now=NOW)
    after = list(db.memories.export("ns"))
    with pytest.raises(Exception, match="erased since"):
        undo(db.writer, updated.record_id, now=NOW + HOUR)  # type: ignore[arg-type]
    assert list(db.memories.export("ns")) == after


def test_pin_bumps_the_version_so_an_edit_read_before_it_is_refused(sqlite_db: Database) -> None:
    # Pinned is what a person decided about the memory: a pin must not be lost to an edit
    # made on what was read before it, and a pin is an update, not a timeline relink.
    db = sqlite_db
    (memory_id,) = seed(db, ["likes green tea"])
    pinned = edits.edit(db.writer, "ns", memory_id, {"pinned": True}, now=NOW, expected_version=1)
    with pytest.raises(edits.VersionConflict, match="version 2, not 1"):
        edits.edit(db.writer, "ns", memory_id, {"pinned": False}, now=NOW, expected_version=1)
    memory = db.memories.get("ns", memory_id)
    assert memory is not None
    assert (memory.pinned, memory.version) == (True, 2)
    assert pinned.record_id is not None
    assert db.records.change_counts([pinned.record_id]) == {pinned.record_id: {"updated": 1}}
