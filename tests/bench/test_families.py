"""The families' pure parts: a chat view of FriendsQA, the halves, and the relevance bench's
AUROC and threshold arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from families.split import halves
from families.views import scene_chat
from locomo_bench.data import Conversation, Question
from relevance import Asked, at_threshold, auroc

NOW = datetime(2024, 1, 2, tzinfo=UTC)


def _episode() -> Conversation:
    turns = tuple(
        {
            "external_id": f"s{scene}:u{i}",
            "content": f"Ross: line {i} of scene {scene}",
            "session_id": f"s{scene}",
        }
        for scene in (1, 2)
        for i in range(8)
    )
    questions = tuple(
        Question(
            qid=f"q{i}",
            text=f"Why did Ross say line {i}?",
            category=0,
            evidence=(f"s2:u{i}",),
            flagged=False,
        )
        for i in range(8)
    )
    return Conversation(index=0, namespace="ep", turns=turns, questions=questions, now=NOW)


def test_scene_chat_asks_each_question_after_other_turns_of_its_answers_scene() -> None:
    episode = _episode()
    chats = scene_chat(episode)
    assert len(chats.questions) == len(episode.questions)
    for asked, original in zip(chats.questions, episode.questions, strict=True):
        *excerpt, last = asked.text.split("\n")
        assert last == original.text
        assert 3 <= len(excerpt) <= 6
        assert all("of scene 2" in line for line in excerpt)  # the answer's own scene
        gold = {t["content"] for t in episode.turns if t["external_id"] in original.evidence}
        assert not gold & set(excerpt)  # never the answer itself
    assert scene_chat(episode) == chats  # the same every time


def test_halves_do_not_depend_on_order_and_cover_every_unit() -> None:
    units = [f"u{i}" for i in range(11)]
    tune, report = halves("fam", units)
    assert (tune, report) == halves("fam", list(reversed(units)))
    assert tune | report == set(units)
    assert not tune & report
    assert len(tune) == 6


def test_auroc_counts_pairs_and_ties() -> None:
    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auroc([0.1], [0.9]) == 0.0
    assert auroc([0.5], [0.5]) == 0.5


def _asked(home: bool, similarity: float, gold: bool) -> Asked:
    return Asked(
        data="d",
        half="tune",
        home=home,
        similarity=(similarity,),
        covered=(1.0,),
        gold=(gold,),
        wanted=1 if home else 0,
    )


def test_threshold_silences_a_search_whose_best_hit_is_below_it() -> None:
    asked = [_asked(True, 0.9, True), _asked(True, -0.9, True), _asked(False, -0.9, False)]
    cut = at_threshold(asked, 0.5)
    assert cut["foreign_nothing"] == 100.0
    assert cut["home_r10"] == 100.0
    assert cut["home_r10_kept"] == pytest.approx(50.0)  # the weak home search answered nothing
