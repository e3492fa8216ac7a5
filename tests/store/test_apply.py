"""Plan operations applied through the repository: one record, exact images, timeline kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store.apply import RecordInfo, apply_operations
from store.errors import NotFound, ValidationFailed
from store.models import MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.repository import Repository
from store.schemas import MemoryIn
from tests.store.test_repository import timeline

NOW = datetime(2026, 2, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def seed(repo: Repository, count: int = 5) -> tuple[int, ...]:
    items = [
        MemoryIn(content=f"fragment {i}", timestamp=NOW + i * HOUR, session_id="s")
        for i in range(count)
    ]
    return repo.add_memories("ns", items, now=NOW).ids


def test_apply_consolidation_summary_takes_fragments_place(repo: Repository) -> None:
    ids = seed(repo)
    repo.add_relation("ns", ids[1], ids[4], "causal", strength=0.8, now=NOW, job="test")
    fragments = ids[1:3]
    ops = [
        CreateMemory(
            key="summary",
            content="fragments 1 and 2, summarised",
            type="interaction_summary",
            event_time=NOW + HOUR,
            replaces_in_timeline=fragments,
        ),
        InheritRelations(from_ids=fragments, to="summary"),
        *[
            CreateRelation(source="summary", target=f, type="derived_from", strength=1.0)
            for f in fragments
        ],
        *[
            SetStatus(memory_id=f, status=MemoryStatus.MERGED, replaced_by="summary")
            for f in fragments
        ],
    ]
    applied = apply_operations(
        repo,
        "ns",
        "consolidator",
        ops,
        now=NOW,
        info=RecordInfo(model="m", tokens_in=10),
        job_state={"watermark": 5},
    )
    summary = applied.created["summary"]
    order = timeline(repo, "ns")
    assert order == [ids[0], summary, ids[3], ids[4]]
    assert summary not in repo.active_memories("ns", fragments)
    edges = {(e.source_id, e.target_id, e.type) for e in repo.edges("ns", [summary])}
    assert (summary, ids[4], "causal") in edges
    assert {(summary, f, "derived_from") for f in fragments} <= edges
    record, operations = repo.record(applied.record_id)  # type: ignore[arg-type]
    assert record.model == "m"
    assert record.tokens_in == 10
    assert all(op.before is not None or op.op.startswith("create") for op in operations)
    assert repo.job_state("consolidator", "ns") == {"watermark": 5}


def test_apply_unknown_or_foreign_id_raises_and_writes_nothing(repo: Repository) -> None:
    ids = seed(repo, 2)
    other = repo.add_memories("other", [MemoryIn(content="x")], now=NOW).ids[0]
    before = list(repo.export("ns"))
    for bad in (other, 9999):
        with pytest.raises(NotFound):
            apply_operations(
                repo,
                "ns",
                "auditor",
                [
                    SetStatus(memory_id=ids[0], status=MemoryStatus.ARCHIVED),
                    SetStatus(memory_id=bad, status=MemoryStatus.ARCHIVED),
                ],
                now=NOW,
            )
    assert list(repo.export("ns")) == before


def test_apply_update_refuses_fields_outside_whitelist(repo: Repository) -> None:
    ids = seed(repo, 1)
    with pytest.raises(ValidationFailed):
        apply_operations(
            repo,
            "ns",
            "auditor",
            [UpdateMemory(memory_id=ids[0], changes={"namespace": "x"})],
            now=NOW,
        )


def test_apply_purge_only_tombstones_and_relinks_timeline(repo: Repository) -> None:
    ids = seed(repo, 3)
    with pytest.raises(ValidationFailed):
        apply_operations(repo, "ns", "retention", [Purge(memory_id=ids[1])], now=NOW)
    apply_operations(
        repo, "ns", "auditor", [SetStatus(memory_id=ids[1], status=MemoryStatus.ARCHIVED)], now=NOW
    )
    applied = apply_operations(repo, "ns", "retention", [Purge(memory_id=ids[1])], now=NOW)
    assert timeline(repo, "ns") == [ids[0], ids[2]]
    assert repo.get_memory("ns", ids[1]) is None
    _, operations = repo.record(applied.record_id)  # type: ignore[arg-type]
    purge = [op for op in operations if op.op == "delete_memory"]
    assert len(purge) == 1
    assert purge[0].before is not None
    assert purge[0].before["content"] == "fragment 1"


def test_apply_nothing_to_do_leaves_no_record(repo: Repository) -> None:
    ids = seed(repo, 1)
    applied = apply_operations(
        repo,
        "ns",
        "auditor",
        [UpdateMemory(memory_id=ids[0], changes={"content": "fragment 0"})],
        now=NOW,
    )
    assert applied.record_id is None
