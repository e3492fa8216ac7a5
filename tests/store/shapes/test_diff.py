"""`records diff`: each job's kind of change told readably, an undo, and the counts by kind."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from store.changes import change_kind, count_kinds, describe, image_kind
from store.database import Database
from store.kinds import MemoryStatus, Outcome
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.schemas import MemoryIn
from store.shapes.diff import NOT_KEPT, SHOWN_CHARS, RecordDiff, diff_json, needed_ids, record_diff
from store.shapes.records import record_show_json
from store.write.record_info import RecordInfo, Settlement
from store.write.undo import undo

NOW = datetime(2026, 2, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
NS = "ns"
PLAIN = RecordInfo()
TEXTS = (
    "Maya ran the half marathon",
    "Maya finished in 2:05",
    "Maya likes green tea",
    "Maya lives in Paris",
    "Maya lives in Lyon",
)


@pytest.fixture
def ids(db: Database) -> tuple[int, ...]:
    items = [
        MemoryIn(content=text, type="event" if i < 2 else "fact", timestamp=NOW + i * HOUR)
        for i, text in enumerate(TEXTS)
    ]
    return db.writer.add_memories(NS, items, now=NOW).ids


def apply(db: Database, job: str, ops: Sequence[Operation], info: RecordInfo = PLAIN) -> int:
    applied = db.writer.apply(NS, job, ops, now=NOW + HOUR, info=info)
    assert applied.record_id is not None
    return applied.record_id


def diff_of(db: Database, record_id: int) -> RecordDiff:
    record, operations = db.records.get(record_id)
    return record_diff(record, operations, lambda wanted: db.memories.texts(NS, wanted))


def entries(diff: RecordDiff) -> list[str]:
    return [entry.line for entry in diff.entries]


def test_diff_consolidation_shows_merge_line_with_sources_and_new_summary(
    db: Database, ids: tuple[int, ...]
) -> None:
    a, b = ids[0], ids[1]
    record_id = apply(
        db,
        "consolidator",
        [
            CreateMemory(
                key="s",
                content="Maya ran the half marathon in 2:05",
                type="interaction_summary",
                event_time=NOW,
                replaces_in_timeline=(a, b),
            ),
            InheritRelations(from_ids=(a, b), to="s"),
            *[
                CreateRelation(source="s", target=i, type="derived_from", strength=1.0)
                for i in ids[:2]
            ],
            *[SetStatus(memory_id=i, status=MemoryStatus.MERGED, replaced_by="s") for i in ids[:2]],
        ],
    )
    diff = diff_of(db, record_id)
    summary = max(i for entry in diff.entries for i in entry.ids)
    merge = diff.entries[0]
    assert merge.kind == "merged"
    assert merge.line == f'#{a}, #{b} -> #{summary}: "Maya ran the half marathon in 2:05" (new)'
    assert merge.details == (f'was #{a} "{TEXTS[0]}"', f'was #{b} "{TEXTS[1]}"')
    # The summary's derived_from edges are its sources, told by the merge line, not listed again.
    assert not [line for line in entries(diff) if line.startswith("new ")]
    assert diff.changes["created"] == 1
    assert diff.changes["merged"] == 2
    assert diff.changes["relations_created"] == 2
    # Leaving the timeline joined the neighbours around the fragments.
    assert entries(diff)[-1].startswith("timeline relinked: #")
    shown = diff_json(diff)
    assert shown["entries"][0]["into"] == {
        "id": summary,
        "text": "Maya ran the half marathon in 2:05",
    }
    assert shown["entries"][0]["merged"][1] == {"id": b, "text": TEXTS[1]}
    assert shown["lines"][0].startswith(f"record #{record_id}: consolidator on 'ns', applied, ")


def test_diff_auditor_supersede_archive_update_and_duplicate_merge(
    db: Database, ids: tuple[int, ...]
) -> None:
    tea, paris, lyon = ids[2], ids[3], ids[4]
    dup = db.writer.add_memories(NS, [MemoryIn(content=TEXTS[0], type="event")], now=NOW).ids[0]
    record_id = apply(
        db,
        "auditor",
        [
            InheritRelations(from_ids=(dup,), to=ids[0]),
            SetStatus(memory_id=dup, status=MemoryStatus.MERGED, replaced_by=ids[0]),
            UpdateMemory(
                memory_id=lyon, changes={"content": "Maya lives in Lyon, France", "importance": 8}
            ),
            SetStatus(memory_id=paris, status=MemoryStatus.SUPERSEDED, replaced_by=lyon),
            SetStatus(memory_id=tea, status=MemoryStatus.ARCHIVED),
        ],
    )
    lines = entries(diff_of(db, record_id))
    assert lines[:4] == [
        f'#{dup} -> #{ids[0]}: "{TEXTS[0]}"',
        f'#{paris} superseded by #{lyon}: "Maya lives in Paris" -> "Maya lives in Lyon, France"',
        f'#{tea} archived: "Maya likes green tea"',
        f'#{lyon} updated: "Maya lives in Lyon" -> "Maya lives in Lyon, France"',
    ]
    update = diff_of(db, record_id).entries[3]
    assert update.details == ("importance: 5 -> 8",)
    changes = dict(diff_of(db, record_id).changes)
    changes.pop("relinked", None)  # neighbours of the retired memories, if any
    assert changes == {"updated": 1, "merged": 1, "superseded": 1, "archived": 1}


def test_diff_linker_relation_names_both_ends_from_current_text(
    db: Database, ids: tuple[int, ...]
) -> None:
    record_id = apply(
        db,
        "linker",
        [
            CreateRelation(
                source=ids[0], target=ids[2], type="causal", strength=0.8, description="tea helps"
            ),
            CreateRelation(source=ids[0], target=ids[1], type="associative", strength=0.55),
        ],
    )
    _, operations = db.records.get(record_id)
    assert needed_ids(operations) == {ids[0], ids[1], ids[2]}
    diff = diff_of(db, record_id)
    assert entries(diff) == [
        f'new relation #{ids[0]} "{TEXTS[0]}" -[causal 0.80]-> #{ids[2]} "{TEXTS[2]}"',
        f'new relation #{ids[0]} "{TEXTS[0]}" -[associative 0.55]-> #{ids[1]} "{TEXTS[1]}"',
    ]
    assert diff.entries[0].details == ('because: "tea helps"',)
    relation = diff_json(diff)["entries"][0]
    assert relation["source"] == {"id": ids[0], "text": TEXTS[0]}
    assert relation["target"] == {"id": ids[2], "text": TEXTS[2]}
    assert diff.changes == {"relations_created": 2}


def test_diff_soul_mapper_trait_with_evidence_and_revision(
    db: Database, ids: tuple[int, ...]
) -> None:
    first = apply(
        db,
        "soul_mapper",
        [
            CreateMemory(key="t", content="Maya is a runner", type="preference", event_time=NOW),
            *[
                CreateRelation(source="t", target=i, type="derived_from", strength=0.9)
                for i in ids[:2]
            ],
        ],
    )
    diff = diff_of(db, first)
    trait = diff.entries[0]
    assert trait.kind == "trait"
    assert trait.line.endswith(': "Maya is a runner"')
    assert trait.line.startswith("new trait #")
    assert trait.details == (f'evidence #{ids[0]} "{TEXTS[0]}"', f'evidence #{ids[1]} "{TEXTS[1]}"')
    # The evidence edges are the trait's, not lines of their own; its neighbours were relinked.
    assert [entry.kind for entry in diff.entries] == ["trait", "relinked"]
    old = trait.ids[0]
    second = apply(
        db,
        "soul_mapper",
        [
            CreateMemory(
                key="t", content="Maya is a keen runner", type="preference", event_time=NOW
            ),
            CreateRelation(source="t", target=ids[1], type="derived_from", strength=0.95),
            InheritRelations(from_ids=(old,), to="t"),
            SetStatus(memory_id=old, status=MemoryStatus.SUPERSEDED, replaced_by="t"),
        ],
    )
    revised = diff_of(db, second)
    new = old + 1
    assert entries(revised)[:2] == [
        f'#{old} superseded by #{new}: "Maya is a runner" -> "Maya is a keen runner"',
        f'new trait #{new}: "Maya is a keen runner"',
    ]
    # The evidence edge inherited from the old trait counts as the new one's evidence too.
    assert revised.entries[1].details == (
        f'evidence #{ids[1]} "{TEXTS[1]}"',
        f'evidence #{ids[0]} "{TEXTS[0]}"',
    )


def test_diff_extractor_retention_and_failed_run(db: Database, ids: tuple[int, ...]) -> None:
    created = apply(
        db,
        "extractor",
        [CreateMemory(key="m", content="Maya adopted a cat", type="event", event_time=NOW)],
    )
    assert entries(diff_of(db, created))[0] == f'new #{ids[-1] + 1} (event): "Maya adopted a cat"'
    apply(db, "linker", [CreateRelation(source=ids[0], target=ids[1], type="temporal", strength=1)])
    apply(
        db, "auditor", [SetStatus(memory_id=ids[0], status=MemoryStatus.MERGED, replaced_by=ids[1])]
    )
    purged = apply(db, "retention", [Purge(memory_id=ids[0])])
    diff = diff_of(db, purged)
    assert entries(diff)[:2] == [
        f"#{ids[0]} purged (merged into #{ids[1]}): {NOT_KEPT}",
        f'relation removed: #{ids[0]} {NOT_KEPT} -[temporal 1.00]-> #{ids[1]} "{TEXTS[1]}"',
    ]
    assert diff.changes["deleted"] == 1
    assert diff.changes["relations_deleted"] == 1
    failed = apply(
        db, "auditor", [], RecordInfo(outcome=Outcome.FAILED, error="ValueError: bad reply")
    )
    lines = diff_of(db, failed).lines()
    assert lines[1:] == ["error: ValueError: bad reply", "  no changes"]


def test_diff_of_undo_says_what_it_restored(db: Database, ids: tuple[int, ...]) -> None:
    merged = apply(
        db,
        "consolidator",
        [
            CreateMemory(
                key="s",
                content="summary",
                type="interaction_summary",
                event_time=NOW,
                replaces_in_timeline=ids[:2],
            ),
            *[SetStatus(memory_id=i, status=MemoryStatus.MERGED, replaced_by="s") for i in ids[:2]],
        ],
    )
    summary = ids[-1] + 1
    result = undo(db.writer, merged, now=NOW + 2 * HOUR)
    diff = diff_of(db, result.record_id)
    assert diff.header[1] == f"undoes record #{merged}: puts back what it changed"
    lines = entries(diff)
    assert f'#{ids[0]} restored to active (was merged): "{TEXTS[0]}"' in lines
    assert f'#{ids[1]} restored to active (was merged): "{TEXTS[1]}"' in lines
    assert f'#{summary} removed (the undone record created it): "summary"' in lines
    assert diff.changes["reactivated"] == 2
    assert diff.changes["deleted"] == 1
    assert f"undone by record #{result.record_id}" in diff_of(db, merged).header


def test_diff_of_an_approved_plan_points_at_the_record_that_applied_it(
    db: Database, ids: tuple[int, ...]
) -> None:
    planned = apply(db, "auditor", [], RecordInfo(outcome=Outcome.PLANNED, stats={"plan": {}}))
    applied = db.writer.apply(
        NS,
        "auditor",
        [SetStatus(memory_id=ids[2], status=MemoryStatus.ARCHIVED)],
        now=NOW + 2 * HOUR,
        info=RecordInfo(stats={"approved_plan": planned}),
        settle=Settlement(record_id=planned),
    ).record_id
    assert applied is not None
    assert f"plan approved: its changes are record #{applied}" in diff_of(db, planned).header
    approval = diff_of(db, applied)
    assert f"applies the approved plan of record #{planned}" in approval.header
    assert entries(approval)[0] == f'#{ids[2]} archived: "{TEXTS[2]}"'


def test_diff_cuts_long_text_in_lines_but_not_in_json(db: Database) -> None:
    text = "word " * 60
    record_id = apply(
        db, "extractor", [CreateMemory(key="m", content=text.strip(), type="event", event_time=NOW)]
    )
    diff = diff_of(db, record_id)
    quoted = diff.entries[0].line.split(": ", 1)[1]
    assert len(quoted) == SHOWN_CHARS + 2  # the quotes
    assert quoted.endswith('…"')
    assert diff_json(diff)["entries"][0]["text"] == text.strip()


def test_change_counts_read_matches_the_images(db: Database, ids: tuple[int, ...]) -> None:
    """The list's grouped count read and the show/diff images name every change alike."""
    apply(
        db,
        "auditor",
        [
            SetStatus(memory_id=ids[0], status=MemoryStatus.MERGED, replaced_by=ids[1]),
            SetStatus(memory_id=ids[2], status=MemoryStatus.ARCHIVED),
            UpdateMemory(memory_id=ids[4], changes={"tags": ["home"]}),
            CreateRelation(source=ids[1], target=ids[3], type="thematic", strength=0.5),
        ],
    )
    apply(db, "auditor", [SetStatus(memory_id=ids[2], status=MemoryStatus.ACTIVE)])
    # A late arrival between two memories relinks both.
    db.writer.add_memories(NS, [MemoryIn(content="between", timestamp=NOW + HOUR / 2)], now=NOW)
    found = db.records.find(limit=100)
    counts = db.records.change_counts(record.id for record in found)
    for record in found:
        shown = record_show_json(*db.records.get(record.id))
        assert counts.get(record.id, {}) == shown["changes_by_kind"]
    kinds = set().union(*(set(c) for c in counts.values()))
    assert {"created", "merged", "archived", "updated", "reactivated", "relinked"} <= kinds
    assert "relations_created" in kinds


def test_change_kind_names() -> None:
    assert change_kind("create_memory") == "created"
    assert change_kind("delete_relation") == "relations_deleted"
    merged = change_kind("update_memory", status_before="active", status_after="merged")
    assert merged == "merged"
    assert change_kind("update_memory", status_before="archived", status_after="active") == (
        "reactivated"
    )
    assert change_kind("update_memory", version_before=1, version_after=2) == "updated"
    assert change_kind("update_memory", version_before=3, version_after=3) == "relinked"
    assert image_kind("update_memory", {"status": "active"}, {"status": "superseded"}) == (
        "superseded"
    )
    counts = count_kinds(["relinked", "created", "relinked", "merged"])
    assert list(counts) == ["created", "merged", "relinked"]
    assert describe(counts) == "1 created, 1 merged, 2 relinked"
    assert describe({}) == "no changes"
