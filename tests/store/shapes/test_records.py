"""How a record's dropped items are counted and said."""

from __future__ import annotations

from store.shapes.records import dropped_items, dropped_total


def test_each_dropped_change_counts_protected_ones_included() -> None:
    stats = {
        "dropped": [{"item": "merge #3, #9", "reason": "ids outside the batch"}],
        "dropped_ids": [41, 42],
        "dropped_protected": 5,
        "protected_ids": [7, 8],
    }

    assert dropped_total(stats) == 8  # 1 invalid item, 2 ids not sent, 5 protected changes
    items = dropped_items(stats)
    assert [item["item"] for item in items] == [
        "merge #3, #9",
        "#41",
        "#42",
        "5 changes touching #7, #8",
    ]
    assert dropped_total({}) == 0
