"""bench/lexical_params.py: each fold's choice is made on its half and scored on the other."""

from __future__ import annotations

from lexical_params import TEXTBOOK, folds, markdown


def row(a: float, b: float, events: float = 50.0) -> dict[str, float]:
    scores = {f"{view}:{fold}": score for view in ("turns", "observations", "chat")
              for fold, score in (("A", a), ("B", b))}  # fmt: skip
    return scores | {"events:A": events, "events:B": events}


def test_each_fold_is_chosen_on_its_half_and_scored_on_the_other() -> None:
    scores = {
        TEXTBOOK: row(70.0, 70.0),
        "0.9,0.4": row(80.0, 60.0),
        "1.2,0.6": row(60.0, 75.0),
        "2.0,0.9": row(75.0, 50.0, events=100.0),  # best only if events counted: never tuned on
    }

    chosen = folds(scores)

    assert chosen == [
        {"tuned_on": "A", "scored_on": "B", "chosen": "0.9,0.4", "chosen_score": 60.0},
        {"tuned_on": "B", "scored_on": "A", "chosen": "1.2,0.6", "chosen_score": 60.0},
    ]
    report = {"commit": "abc", "scores": scores, "defaults": "0.9,0.4", "folds": chosen}
    assert "| A | 0.9,0.4 | 60.00 | 70.00 | 60.00 |" in markdown(report)
