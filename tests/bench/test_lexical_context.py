"""bench/lexical_context.py: each fold chooses the weight on its half (the rule itself is
tested in tests/store/test_lexical_chain.py)."""

from __future__ import annotations

from lexical_context import OFF, folds, markdown


def row(turns: tuple[float, float], others: tuple[float, float]) -> dict[str, float]:
    scores = {f"turns:{fold}": value for fold, value in zip("AB", turns, strict=True)}
    for view in ("observations", "chat"):
        scores |= {f"{view}:{fold}": value for fold, value in zip("AB", others, strict=True)}
    return scores | {"events:A": 50.0, "events:B": 50.0, "turns:all": sum(turns) / 2}


def test_each_fold_is_chosen_on_its_half_and_scored_on_the_other() -> None:
    scores = {
        OFF: row((70.0, 70.0), (70.0, 70.0)),
        "0.7": row((80.0, 72.0), (70.0, 70.0)),
        "0.9": row((60.0, 90.0), (70.0, 70.0)),
    }

    chosen = folds(scores)

    assert [(fold["tuned_on"], fold["chosen"]) for fold in chosen] == [
        ("A", "0.7"),
        ("B", "0.9"),
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
    assert "| A | 0.7 | 70.67 | 70.00 | 72.0 | 70.0 |" in markdown(report)
