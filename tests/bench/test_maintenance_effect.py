"""bench/maintenance_effect.py end to end on a synthetic mini-conversation (no LoCoMo data).

A fake embedder (bag of hashed words) and embedded Chroma in tmp_path; the scripted model is the
benchmark's own, on 127.0.0.1 through litellm, as in a real run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from effect_bench.days import run_days
from effect_bench.effect import run_effect
from effect_bench.metrics import Chains, effect
from effect_bench.pollution import KINDS, Pollutant, Truth, pollute
from effect_bench.recall import score
from effect_bench.rewording import change_detail, paraphrase
from effect_bench.stores import Stores
from locomo_bench.data import Conversation, Question

from tests.helpers.fake_embedder import FakeEmbedder

SESSIONS = {
    "session_1": datetime(2026, 1, 5, 10, 0, tzinfo=UTC),
    "session_2": datetime(2026, 1, 12, 18, 0, tzinfo=UTC),
    "session_3": datetime(2026, 1, 20, 9, 30, tzinfo=UTC),
}
# Every turn has a word a paraphrase swaps and a detail an update changes, so that any turn
# can take any kind of pollution; one word in twelve or more changes, so the fake embedder
# keeps each rewording near its turn.
LINES = {
    "D1:1": "Anna: We adopted two dogs from the shelter near our house last spring and they "
    "are amazing.",
    "D1:2": "Ben: My sister runs a small bakery downtown and she really bakes fresh bread "
    "every morning.",
    "D1:3": "Anna: I started learning the guitar at the community center because my teacher "
    "there is patient.",
    "D1:4": "Ben: On Saturday we drove out to the lake with the whole family for a great "
    "picnic lunch.",
    "D2:1": "Anna: The painting I finished this week shows a red barn under a beautiful "
    "stormy evening sky.",
    "D2:2": "Ben: My son joined the school team and he often practices there after class with "
    "his coach.",
    "D2:3": "Anna: We go hiking in the hills north of town every month with a group of old "
    "friends.",
    "D2:4": "Ben: I read three books about sailing during the holidays and I am excited to try "
    "it myself.",
    "D3:1": "Anna: Our daughter turned seven in March and she was so happy with the cake we "
    "baked together.",
    "D3:2": "Ben: My brother lives by the beach and he often invites us to visit him for long "
    "weekends.",
    "D3:3": "Anna: I recently bought a blue bicycle so I can ride to the office on Monday "
    "mornings.",
    "D3:4": "Ben: We took the kids camping in the forest last week and everyone slept in one "
    "big tent.",
}
QUESTIONS = (
    ("How many dogs did Anna adopt from the shelter?", 4, ("D1:1",)),
    ("Where does Ben's brother live?", 4, ("D3:2",)),
    ("What does Ben's son do after class?", 1, ("D2:2",)),
    ("Which instrument is Anna learning at the community center?", 4, ("D1:3",)),
)


def mini_conversation() -> Conversation:
    turns = tuple(
        {
            "content": text,
            "timestamp": SESSIONS[f"session_{dia_id[1]}"],
            "session_id": f"session_{dia_id[1]}",
            "external_id": dia_id,
        }
        for dia_id, text in LINES.items()
    )
    questions = tuple(
        Question(qid=f"mini_qa{n}", text=text, category=cat, evidence=evidence, flagged=False)
        for n, (text, cat, evidence) in enumerate(QUESTIONS)
    )
    return Conversation(
        index=0,
        namespace="mini",
        turns=turns,
        questions=questions,
        now=SESSIONS["session_3"] + timedelta(days=1),
    )


@pytest.fixture
def stores(tmp_path: Path) -> Stores:
    return Stores(work=tmp_path, embedder=FakeEmbedder())


@pytest.mark.slow
def test_effect_run_hides_every_known_pollutant_and_loses_nothing(stores: Stores) -> None:
    conv = mini_conversation()

    section = run_effect(stores, [conv], share=0.1, seed=0)

    assert section["pollution"]["per_kind"] == dict.fromkeys(KINDS, 1)
    dreamed = section["dreamed"]["scripted"]
    found = dreamed["effect"]
    assert found["hidden_pct"] == dict.fromkeys([*KINDS, "all"], 100.0)
    assert found["hidden_as_truth_pct"]["all"] == 100.0
    assert found["evidence_turns"] == 4
    assert (found["evidence_lost"], found["turns_lost"], found["false_merges"]) == (0, 0, 0)
    assert found["retired"] == 4  # three polluting copies and the turn the update changed
    # Exact and later copies need no model; the paraphrase and the update did.
    assert dreamed["jobs"]["auditor"]["llm_calls"] >= 1
    recall = section["recall"]
    assert recall["clean"]["all"]["overall"]["n"] == len(QUESTIONS)
    for summary in (recall["clean"], recall["polluted"], dreamed["recall"]):
        assert 0.0 <= summary["all"]["overall"]["r10"] <= 100.0
    # Everything in a store this small is found: dreaming keeps it found, through the update
    # that carries the turn it changed.
    assert dreamed["recall"]["all"]["overall"]["r10"] == recall["clean"]["all"]["overall"]["r10"]


@pytest.mark.slow
def test_days_purge_after_the_window_and_undo_brings_retired_memories_back(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRETARY_JOBS_RETENTION_UNDO_DAYS", "2")

    days = run_days(
        stores, [mini_conversation()], days=5, arrival_days=2, share=0.1, seed=0, undo_every=2
    )

    assert days["undo_window_days"] == 2
    assert (days["lost_max_any_night"], days["false_merges"], days["failed_runs"]) == (0, 0, [])
    assert days["effect"]["hidden_pct"]["all"] == 100.0
    assert days["retired"] == days["purged"] == 4
    assert (days["purged_before_window"], days["tombstones_kept_past_window"]) == (0, 0)
    undo = days["undo"]
    assert undo["checks"] == 3  # nights 2, 4 and the last
    assert undo["round_trips_exact"] == undo["checks"]
    assert undo["rollbacks"] >= 1
    assert undo["rollback_restored"] == undo["rollback_retired"] > 0
    assert undo["restore_exports_back"] == undo["restore_records"] > 0
    assert undo["purged_records_checked"] >= 1
    assert undo["purged_still_present"] == 0
    assert undo["purged_beyond_undo"] == undo["purged_retired"]


def test_pollute_is_deterministic_and_keeps_its_ground_truth() -> None:
    conv = mini_conversation()
    counts = dict.fromkeys(KINDS, 2)

    first, again = pollute(conv, counts, seed=3), pollute(conv, counts, seed=3)

    assert first == again
    assert sorted(p.kind for p in first) == sorted(KINDS * 2)
    assert len({p.source for p in first}) == len(first)  # disjoint turns
    for p in first:
        turn = LINES[p.source]
        if p.kind == "exact":
            assert p.item["content"] == turn
        elif p.kind == "later":
            assert p.item["content"] == turn
            assert p.item["timestamp"] > SESSIONS[p.item["session_id"]]
        elif p.kind == "paraphrase":
            assert p.item["content"] == paraphrase(turn) != turn
        else:
            assert p.item["content"] == change_detail(turn) != turn
            assert p.item["timestamp"] > SESSIONS[f"session_{p.source[1]}"]


def test_rewording_keeps_the_speaker_and_changes_one_detail() -> None:
    text = "Anna: We adopted two dogs last spring. They are amazing, honestly the best pets."

    assert paraphrase(text) == (
        "Anna: They are incredible, honestly the best pets. We adopted two dogs last spring."
    )
    assert change_detail(text) == (
        "Anna: We adopted three dogs last spring. They are amazing, honestly the best pets."
    )
    assert change_detail("Ben: Sounds good to me!") is None


def _pollutant(kind: str, source: str) -> Pollutant:
    return Pollutant(kind=kind, source=source, session="s", item={"content": "x"})


def _images(**statuses: tuple[str, int | None]) -> dict[int, dict[str, Any]]:
    return {
        int(key[1:]): {"status": status, "replaced_by_id": into}
        for key, (status, into) in statuses.items()
    }


def test_effect_counts_hidden_lost_and_false_merges_from_the_chains() -> None:
    # Turns D1 (id 1), D2 (2), D3 (3); 10 copies D1, 11 updates D2.
    truth = Truth(
        turns={"D1": 1, "D2": 2, "D3": 3},
        pollutants={10: _pollutant("exact", "D1"), 11: _pollutant("update", "D2")},
    )
    before = {1, 2, 3, 10, 11}
    chains = Chains()
    # The copy merged into its turn, the changed turn superseded by its update (then purged:
    # the chain is remembered), and D3 archived with nothing carrying it.
    chains.see(_images(m1=("active", None), m3=("archived", None), m10=("merged", 1)))
    chains.see(_images(m2=("superseded", 11), m11=("active", None)))
    chains.see({}, purged=[2])

    found = effect(before, chains, truth, evidence=["D2", "D3"])

    assert found.hidden == {"exact": 1, "later": 0, "paraphrase": 0, "update": 1}
    assert found.hidden_as_truth == found.hidden
    assert found.evidence_lost == ["D3"]
    assert found.turns_lost == ["D3"]
    assert [m["id"] for m in found.false_merges] == [3]
    assert found.retired == 3


def test_score_counts_a_hit_for_the_turns_it_carries() -> None:
    question = Question(qid="q", text="?", category=4, evidence=("D1", "D2"), flagged=False)
    represents = {7: {"D1"}, 8: {"D2", "D9"}}

    both = score(question, [5, 7, 6, 8], represents)
    one = score(question, [5, 7, 6], represents)

    assert (both.r5, both.r10) == (1.0, 1.0)
    assert (one.r5, one.r10) == (0.5, 0.5)
    assert 0.0 < one.ndcg10 < both.ndcg10 < 1.0
