"""bench/lexical_context.py: context from the same session only, the max rule, the folds."""

from __future__ import annotations

from datetime import UTC, datetime

from lexical_context import OFF, folds, markdown, neighbour_texts
from locomo_bench.prepared import Snapshot, _with_context

from store.reads.search import SearchRow

T = datetime(2023, 5, 8, tzinfo=UTC)


def search_row(mid: int, session: str | None, prev: int | None, nxt: int | None) -> SearchRow:
    return SearchRow(mid, "event", "[]", "{}", T, session, prev, nxt, 5.0, False)


def test_neighbours_give_context_only_within_their_session() -> None:
    rows = [
        search_row(1, "s1", None, 2),
        search_row(2, "s1", 1, 3),
        search_row(3, "s2", 2, 4),  # a new session starts: 2 is not its context
        search_row(4, None, 3, None),  # no session: no context, none given
    ]
    snap = Snapshot(
        search={row.id: row for row in rows},
        external={row.id: f"D{row.id}" for row in rows},
        content={row.id: f"text {row.id}" for row in rows},
    )

    assert neighbour_texts(snap, 2, ("prev_id",)) == ["text 1"]
    assert neighbour_texts(snap, 2, ("prev_id", "next_id")) == ["text 1"]
    assert neighbour_texts(snap, 1, ("prev_id", "next_id")) == ["text 2"]
    assert neighbour_texts(snap, 3, ("prev_id", "next_id")) == []
    assert neighbour_texts(snap, 4, ("prev_id",)) == []


def test_the_bm25_part_is_the_better_of_own_and_weighted_context_over_its_best() -> None:
    own = {1: 1.0, 2: 0.5}
    context = {3: 1.0, 2: 0.9, 1: 0.2}

    mixed = _with_context(own, context, 0.5)

    assert list(mixed) == [1, 2, 3]
    assert mixed == {1: 1.0, 2: 0.5, 3: 0.5}
    assert _with_context(own, context, 2.0) == {3: 1.0, 2: 0.9, 1: 0.5}


def row(turns: tuple[float, float], others: tuple[float, float]) -> dict[str, float]:
    scores = {f"turns:{fold}": value for fold, value in zip("AB", turns, strict=True)}
    for view in ("observations", "chat"):
        scores |= {f"{view}:{fold}": value for fold, value in zip("AB", others, strict=True)}
    return scores | {"events:A": 50.0, "events:B": 50.0, "turns:all": sum(turns) / 2}


def test_each_fold_is_chosen_on_its_half_and_scored_on_the_other() -> None:
    scores = {
        OFF: row((70.0, 70.0), (70.0, 70.0)),
        "before 0.7": row((80.0, 72.0), (70.0, 70.0)),
        "both 0.7": row((60.0, 90.0), (70.0, 70.0)),
    }

    chosen = folds(scores)

    assert [(fold["tuned_on"], fold["chosen"]) for fold in chosen] == [
        ("A", "before 0.7"),
        ("B", "both 0.7"),
    ]
    assert (chosen[0]["chosen_turns"], chosen[0]["off_turns"]) == (72.0, 70.0)
    assert chosen[1]["chosen_score"] == round((60.0 + 70.0 + 70.0) / 3, 2)
    report = {
        "date": "2026-11-27 09:46",
        "machine": "m",
        "commit": "abc",
        "scores": scores,
        "folds": chosen,
    }
    assert "| A | before 0.7 | 70.67 | 70.00 | 72.0 | 70.0 |" in markdown(report)
