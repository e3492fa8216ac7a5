"""The families' pure parts: a chat view of FriendsQA, Molweni's conversion, the halves, and
the relevance bench's AUROC and threshold arithmetic."""

from __future__ import annotations

import json
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


def _molweni_dialogue(n: int) -> dict[str, object]:
    edus = [
        {"text": "how do i mount my usb drive ?", "speaker": f"asker{n}"},
        {"text": "add it to fstab , it 's easy", "speaker": "helper"},
        {"text": "thanks !", "speaker": f"asker{n}"},
    ]
    context = " ".join(f"{e['speaker']}: {e['text']}".lower() for e in edus)
    answer = "add it to fstab"
    return {
        "edus": edus,
        "context": context,
        "qas": [
            {
                "id": f"q{n}",
                "question": "What's the way to mount the drive ?",
                "answers": [{"text": answer, "answer_start": context.index(answer)}],
                "is_impossible": False,
            },
            {"id": f"x{n}", "question": "Why ?", "answers": [], "is_impossible": True},
        ],
    }


def test_molweni_conversion_finds_the_utterance_each_answer_lies_in() -> None:
    from families.molweni.convert import NAMESPACES, convert_text

    text = json.dumps({"data": {"dialogues": [_molweni_dialogue(n) for n in range(8)]}})
    namespaces = convert_text(text)
    assert len(namespaces) == NAMESPACES
    first = namespaces[0]
    assert [m["content"] for m in first.memories[:2]] == [
        "asker0: how do i mount my usb drive?",
        "helper: add it to fstab, it's easy",
    ]
    assert {m["session_id"] for m in first.memories} == {"dialogue-000", "dialogue-001"}
    (question, _) = first.questions  # the unanswerable ones are left out
    assert question.text == "What's the way to mount the drive?"
    assert question.type == "what"
    assert question.evidence == ("d000:u1",)
    assert first.now > max(m["timestamp"] for m in first.memories)


def test_molweni_conversion_refuses_a_context_that_does_not_line_up() -> None:
    from families.molweni.convert import convert_text

    dialogues = [_molweni_dialogue(n) for n in range(4)]
    dialogues[2]["context"] = "someone else: " + str(dialogues[2]["context"])
    with pytest.raises(ValueError, match="not at 0 of the context"):
        convert_text(json.dumps({"data": {"dialogues": dialogues}}))


def test_prefeval_deals_each_topic_over_the_users_and_keeps_a_repeated_text_once() -> None:
    from families.prefeval.convert import NAMESPACES, TOPICS, convert_topics

    topics = {
        topic: [
            {"preference": f"I like {topic} thing {i}.", "question": f"Any {topic} idea {i}?"}
            for i in range(NAMESPACES + 1)
        ]
        for topic in TOPICS
    }
    # The same preference for the first and the eleventh item of a topic: the same user.
    topics["pet_ownership"][NAMESPACES]["preference"] = "I like  pet_ownership thing 0."
    users = convert_topics(topics)
    assert len(users) == NAMESPACES
    first = users[0]
    assert len(first.questions) == 2 * len(TOPICS)
    assert len(first.memories) == 2 * len(TOPICS) - 1  # the repeated text is one memory
    asked = {q.qid: q for q in first.questions}
    assert asked[f"prefeval-pet_ownership-{NAMESPACES}"].evidence == ("pet_ownership:0",)
    assert asked["prefeval-travel_hotel-0"].type == "travel"
    assert {m["external_id"] for m in users[1].memories} >= {"travel_hotel:1"}
    assert not any("session_id" in m for m in first.memories)
    times = [m["timestamp"] for m in first.memories]
    assert len(set(times)) == len(times)
    assert first.now > max(times)


def test_prefeval_chat_asks_each_request_after_turns_of_the_next_topics_chat() -> None:
    import importlib.util
    from pathlib import Path

    from families.prefeval.convert import NAMESPACES, TOPICS, convert_topics

    path = Path(__file__).resolve().parents[2] / "bench/families/prefeval-chat/convert.py"
    spec = importlib.util.spec_from_file_location("prefeval_chat_convert", path)
    assert spec is not None
    assert spec.loader is not None
    chat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chat)

    topics = {
        t: [{"preference": f"I like {t} {i}.", "question": f"Any {t} idea {i}?"} for i in range(3)]
        for t in TOPICS
    }
    personas = {
        t: [
            {"conversation": {str(k): {"user": f"{t} turn {k} of {i}"} for k in range(5)}}
            for i in range(3 if t != TOPICS[1] else 1)  # the second topic has one chat only
        ]
        for t in TOPICS
    }
    users = chat.chatted(convert_topics(topics), personas)
    asked = {q.qid: q for u in users for q in u.questions}
    lines = asked[f"prefeval-{TOPICS[0]}-0"].text.splitlines()
    assert 3 <= len(lines) <= 5
    assert lines[0] == f"user: {TOPICS[1]} turn 0 of 0"
    assert lines[-1] == f"user: Any {TOPICS[0]} idea 0?"
    assert asked[f"prefeval-{TOPICS[0]}-0"].evidence == (f"{TOPICS[0]}:0",)
    # The last topic's requests are asked after the first topic's chats.
    assert asked[f"prefeval-{TOPICS[-1]}-2"].text.startswith(f"user: {TOPICS[0]} turn 0 of 2")
    # No chat of the second topic at index 1: the first topic's request there is left out.
    assert f"prefeval-{TOPICS[0]}-1" not in asked
    assert len(users) == NAMESPACES
