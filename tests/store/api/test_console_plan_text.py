"""A stored plan told in words for the console's Plans page (pure)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, datetime

from store.api.console.plan_text import plan_changes
from store.kinds import MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    Operation,
    SetStatus,
    UpdateMemory,
    encode_operation,
)

TEXTS = {7: "Zoe went hiking.", 8: "Zoe reached the summit.", 9: "Zoe likes tea."}


def lookup(ids: Collection[int]) -> Mapping[int, str]:
    return {i: TEXTS[i] for i in ids if i in TEXTS}


def stats(*changes: tuple[str, list[Operation]]) -> dict[str, object]:
    return {
        "plan": {
            "changes": [
                {"label": label, "operations": [encode_operation(op) for op in ops]}
                for label, ops in changes
            ]
        }
    }


def test_plan_merge_puts_fragments_beside_the_summary() -> None:
    when = datetime(2026, 11, 1, tzinfo=UTC)
    ops: list[Operation] = [
        CreateMemory(key="s0", content="Zoe hiked to the summit.", type="summary", event_time=when),
        SetStatus(memory_id=7, status=MemoryStatus.MERGED, replaced_by="s0"),
        SetStatus(memory_id=8, status=MemoryStatus.MERGED, replaced_by="s0"),
        CreateRelation(source="s0", target=7, type="derived_from", strength=1.0),
    ]
    (change,) = plan_changes(stats(("summarise [7, 8]", ops)), lookup)
    assert change.label == "summarise [7, 8]"
    assert change.before == ("#7 Zoe went hiking.", "#8 Zoe reached the summit.")
    assert change.after == ("new summary: Zoe hiked to the summit.",)
    assert "#7 \"Zoe went hiking.\" becomes merged by the new memory 's0'" in change.lines
    assert "the new memory 's0' -derived_from-> #7 \"Zoe went hiking.\"" in change.lines


def test_plan_update_shows_text_before_and_after() -> None:
    ops: list[Operation] = [UpdateMemory(memory_id=9, changes={"content": "Zoe likes green tea."})]
    (change,) = plan_changes(stats(("reword", ops)), lookup)
    assert change.before == ("#9 Zoe likes tea.",)
    assert change.after == ("#9 Zoe likes green tea.",)


def test_plan_without_a_stored_plan_has_no_changes() -> None:
    assert plan_changes({}, lookup) == []
