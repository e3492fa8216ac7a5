"""bench/lexical_context.py: each fold chooses the weight on its half (the rule itself is
tested in tests/store/lexical/test_lexical_chain.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from lexical_context import OFF, folds, markdown
from locomo_bench.data import Conversation, Question
from locomo_bench.views import observation_conversation


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


def test_the_extracted_view_is_the_observations_with_their_session_ids() -> None:
    conv = Conversation(
        index=0,
        namespace="conv-0",
        turns=({"external_id": "D1:1"}, {"external_id": "D2:1"}),
        questions=(
            Question(qid="q0", text="Where?", category=1, evidence=("D2:1",), flagged=False),
        ),
        now=datetime(2023, 6, 1, tzinfo=UTC),
    )
    sample = {
        "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2_date_time": "9:00 am on 9 May, 2023",
        },
        "observation": {
            "session_1_observation": {"Ann": [["Ann paints.", "D1:1"]]},
            "session_2_observation": {"Ann": [["Ann went to Paris.", "D2:1"]]},
        },
    }

    plain = observation_conversation(conv, sample)
    extracted = observation_conversation(conv, sample, sessions=True)

    assert [m.get("session_id") for m in plain.turns] == [None, None]
    assert [m["session_id"] for m in extracted.turns] == ["session_1", "session_2"]
    assert [m["timestamp"].day for m in extracted.turns] == [8, 9]
    assert extracted.questions[0].evidence == ("O2:1",)
