"""How a query is read by its shape: a keyword query or a question as given, a chat excerpt with
its latest turn weighted."""

from __future__ import annotations

import numpy as np
import pytest

from store.search.query_shape import (
    CONTEXT_WORDS,
    FOLLOWS_FROM,
    FOLLOWS_TO,
    focus_of,
    follows_share,
    query_terms,
    query_vector,
    shape_query,
    turns_of,
    weigh,
)
from store.search.scoring import mix_scores
from store.text import content_hash

CHAT = """Caroline: hey! how was the weekend, anything fun?
Melanie: pretty quiet, we baked bread and watched a movie with the kids
Caroline: sounds lovely, I spent mine painting the fence
Melanie: When did Caroline go to the LGBTQ support group?"""


@pytest.mark.parametrize(
    "query",
    ["sailing novel", "When did Caroline go to the LGBTQ support group?", "  padded  "],
)
def test_one_line_query_searched_as_given(query: str) -> None:
    found = shape_query(query, focus_lexical=0.75, focus_dense=0.7)
    assert not found.chat
    assert found.focus == query.strip()
    assert found.lexical == found.dense == ((query.strip(), 1.0),)


def test_chat_focus_is_the_latest_turn_weighted() -> None:
    found = shape_query(CHAT, focus_lexical=0.75, focus_dense=0.7)
    latest = "Melanie: When did Caroline go to the LGBTQ support group?"
    assert found.chat
    assert found.focus == latest
    (focus, focus_share), (earlier, earlier_share) = found.lexical  # BM25 searches each apart
    assert (focus, focus_share) == (latest, 0.75)
    assert earlier_share == pytest.approx(0.25)
    assert "baked bread" in earlier
    assert latest not in earlier
    (focus, focus_weight), (context, context_weight) = found.dense
    assert (focus, focus_weight) == (latest, 0.7)
    assert context_weight == pytest.approx(0.3)
    assert context.endswith(latest)


def test_chat_short_latest_turn_takes_the_one_before() -> None:
    query = "I ran the Lisbon half marathon in May\nnice!\nand when?"
    turns = turns_of(query)
    assert focus_of(turns) == 0  # "nice!" + "and when?" is too short: back to the first turn
    found = shape_query("chatter first line here\n" + query, focus_lexical=0.5, focus_dense=0.5)
    assert found.focus.startswith("I ran the Lisbon half marathon")


def test_chat_focus_dense_zero_embeds_the_excerpt_only() -> None:
    found = shape_query(CHAT, focus_lexical=1.0, focus_dense=0.0)
    assert len(found.dense) == 1
    assert found.dense[0][1] == 1.0
    assert found.lexical == ((found.focus, 1.0),)  # the focus alone


def test_long_single_line_is_a_paragraph_searched_as_given() -> None:
    # A summary or a memory's own text: embedded as it was, so it is its own nearest vector.
    paragraph = " ".join(["we talked about the weather for a while."] * 30)
    found = shape_query(paragraph, focus_lexical=0.75, focus_dense=0.7, aside=0.5)
    assert not found.chat
    assert [(r.lexical, r.dense, r.weight) for r in found.readings] == [
        (((paragraph, 1.0),), ((paragraph, 1.0),), 1.0)
    ]


def test_chat_ending_in_a_question_reads_its_excerpt_aside_until_weighed() -> None:
    found = shape_query(CHAT, focus_lexical=0.9, focus_dense=0.7, aside=0.6)
    main, excerpt = found.readings
    assert main.weight == 1.0
    assert (main.lexical, main.dense) == (found.lexical, found.dense)
    assert excerpt.dense == excerpt.lexical == ((CHAT, 1.0),)  # words and meaning, as given
    assert excerpt.weight == 0.6
    earlier = CHAT.rsplit("\n", 1)[0]
    assert found.follows == (found.focus, earlier)  # `weigh` compares the two
    assert shape_query(CHAT, focus_lexical=0.9, focus_dense=0.7).also == ()  # no aside: focus only


def test_chat_asking_nothing_is_about_the_whole_excerpt_its_focus_read_aside() -> None:
    chat = CHAT.rsplit("\n", 1)[0] + "\nMelanie: it was a rough week at work, honestly."
    focus, excerpt = shape_query(chat, focus_lexical=0.9, focus_dense=0.7, aside=0.6).readings
    assert (focus.weight, excerpt.weight) == (0.6, 1.0)


def _unit(angle: float) -> np.ndarray:
    return np.array([np.cos(angle), np.sin(angle)], dtype=np.float32)


@pytest.mark.parametrize(
    ("similarity", "weight"),
    [
        (0.0, 0.6),  # the question leaves the chat: it is the subject, the excerpt aside
        (FOLLOWS_FROM, 0.6),
        ((FOLLOWS_FROM + FOLLOWS_TO) / 2, 0.8),
        (FOLLOWS_TO, 1.0),  # it goes on with the chat: the excerpt read fully
        (0.95, 1.0),
    ],
)
def test_weigh_reads_the_excerpt_as_far_as_the_question_follows_the_chat(
    similarity: float, weight: float
) -> None:
    long = "\n".join([f"turn {i} " + "word " * 40 for i in range(10)] + ["and then what?"])
    found = shape_query(long, focus_lexical=0.9, focus_dense=0.7, aside=0.6)
    focus, earlier = found.follows or ("", "")
    vectors = {focus: _unit(0.0), earlier: _unit(float(np.arccos(similarity)))}
    weighed = weigh(found, vectors.__getitem__)
    assert [r.weight for r in weighed.also] == pytest.approx([weight, weight])  # whole, tail
    assert weighed.weight == 1.0
    assert weighed.follows is None
    assert weigh(weighed, vectors.__getitem__) is weighed  # weighed once


def test_follows_share_is_a_clamped_line() -> None:
    assert follows_share(-1.0) == 0.0
    assert follows_share(FOLLOWS_TO + 0.1) == 1.0
    assert 0.0 < follows_share((FOLLOWS_FROM + FOLLOWS_TO) / 2) < 1.0


def test_only_a_chat_ending_in_a_question_is_weighed() -> None:
    chat = CHAT.rsplit("\n", 1)[0] + "\nMelanie: it was a rough week at work, honestly."
    for shape in (
        shape_query(chat, focus_lexical=0.9, focus_dense=0.7, aside=0.6),
        shape_query("one line?", focus_lexical=0.9, focus_dense=0.7, aside=0.6),
    ):
        assert shape.follows is None
        assert weigh(shape, lambda text: pytest.fail("embedded " + text)) is shape


def test_chat_echoes_are_its_earlier_turns_with_and_without_their_speaker() -> None:
    found = shape_query(CHAT, focus_lexical=0.9, focus_dense=0.7, aside=0.5)
    earlier = "Melanie: pretty quiet, we baked bread and watched a movie with the kids"
    assert content_hash(earlier) in found.echoes
    assert content_hash(earlier.split(": ", 1)[1]) in found.echoes
    assert content_hash(found.focus) not in found.echoes  # the focus may still be found


def test_long_chat_is_read_whole_and_by_its_tail() -> None:
    turns = [f"turn {i} " + "word " * 40 for i in range(10)] + ["what about the cat?"]
    query = "\n".join(turns)
    found = shape_query(query, focus_lexical=0.75, focus_dense=0.5, aside=1.0)
    whole, tail = found.also
    assert whole.dense == whole.lexical == ((query, 1.0),)  # as given: what the model reads of it
    assert tail.lexical == tail.dense
    ((text, _),) = tail.dense
    assert text.endswith("what about the cat?")
    assert "turn 0 " not in text


def test_context_is_the_excerpt_tail() -> None:
    turns = [f"turn {i} " + "word " * 40 for i in range(10)] + ["what about the cat?"]
    found = shape_query("\n".join(turns), focus_lexical=0.75, focus_dense=0.5)
    context = found.dense[1][0]
    assert "turn 0 " not in context  # the beginning is beyond what the model reads
    assert context.endswith("what about the cat?")
    assert len(context.split()) <= CONTEXT_WORDS + 45


def test_query_vector_is_the_unit_mix_of_its_parts() -> None:
    vectors = {"a": np.array([1.0, 0.0], dtype=np.float32), "b": np.array([0, 1.0], np.float32)}
    found = shape_query(
        "line one\nline two is long enough here", focus_lexical=0.5, focus_dense=0.5
    )
    assert found.chat
    texts = {text: vectors["a" if i == 0 else "b"] for i, (text, _) in enumerate(found.dense)}
    mixed = query_vector(found, lambda text: texts[text])
    assert np.linalg.norm(mixed) == pytest.approx(1.0)
    assert mixed[0] == pytest.approx(mixed[1])  # equal weights, orthogonal parts
    single = shape_query("one line", focus_lexical=0.5, focus_dense=0.5)
    assert query_vector(single, lambda text: vectors["a"]) is vectors["a"]


def test_mix_scores_weights_normalises_and_keeps_the_best_k() -> None:
    focus = {1: 1.0, 2: 0.5}
    chatter = {3: 1.0, 2: 1.0}  # memory 3 repeats the chatter; 2 matches both
    mixed = mix_scores([(focus, 0.75), (chatter, 0.25)], 2)
    assert list(mixed) == [1, 2]  # 1: 0.75, 2: 0.625, 3: 0.25
    assert mixed[1] == 1.0
    assert mixed[2] == pytest.approx(0.625 / 0.75)
    assert mix_scores([(focus, 1.0)], 1) == focus  # one part of weight 1: as it is
    assert mix_scores([({}, 0.5), ({}, 0.5)], 5) == {}


def test_query_terms_of_a_chat_are_the_whole_the_focus_and_each_telling_turn() -> None:
    chat = "Melanie: yeah sure\nMelanie: we adopted a puppy from the shelter\nMelanie: so?"
    terms = query_terms(shape_query(chat, focus_lexical=0.9, focus_dense=0.7, aside=0.5))
    whole, focus, *turns = terms
    assert {"puppi", "shelter", "melani"} <= whole
    assert "shelter" in focus  # "so?" is too short: the focus reaches back a turn
    assert turns == [frozenset({"adopt", "puppi", "shelter"})]  # "yeah sure": too few
    assert query_terms(shape_query("adopted puppy", focus_lexical=0.9, focus_dense=0.7)) == (
        frozenset({"adopt", "puppi"}),
    )
