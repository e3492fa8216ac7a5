"""What a refused undo tells the operator to do: the records to undo first, in an order that
works, and never a record that undoing another one takes back already."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store.database import Database
from store.kinds import MemoryStatus
from store.operations import SetStatus
from store.schemas import MemoryIn
from store.write.undo import UndoConflict, cascade_order, undo

NOW = datetime(2026, 2, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_a_refusal_behind_a_redo_names_the_redo_not_the_record_it_redid(db: Database) -> None:
    items = [MemoryIn(content=f"fragment {i}", timestamp=NOW + i * HOUR) for i in range(3)]
    added = db.writer.add_memories("ns", items, now=NOW)
    keeper, copy = added.ids[0], added.ids[2]
    merge = SetStatus(memory_id=copy, status=MemoryStatus.MERGED, replaced_by=keeper)
    merged = db.writer.apply("ns", "auditor", [merge], now=NOW + HOUR).record_id
    assert merged is not None
    unmerged = undo(db.writer, merged, now=NOW + 2 * HOUR).record_id
    redone = undo(db.writer, unmerged, now=NOW + 3 * HOUR).record_id  # the merge, again
    with pytest.raises(UndoConflict) as refused:
        undo(db.writer, added.record_id, now=NOW + 4 * HOUR)
    # Both the redo and the merge it put back changed the copy; undoing the redo takes the
    # merge back with it, so "undo #redo, then #merged" would end in "already undone".
    assert {d.record_id for d in refused.value.dependents} == {redone, merged}
    assert f"First undo #{redone}, or undo this record with --cascade" in str(refused.value)
    assert f"#{merged}," not in refused.value.advice[0]
    assert cascade_order(db.writer, added.record_id, now=NOW + 4 * HOUR) == (redone,)
    lines = refused.value.lines()
    assert lines[0].endswith("it conflicts with:")
    assert all("\n" not in line and len(line) < 300 for line in lines)
    # The advice works as given.
    undo(db.writer, redone, now=NOW + 5 * HOUR)
    undo(db.writer, added.record_id, now=NOW + 6 * HOUR)
    assert list(db.memories.export("ns")) == []
