"""How a query is read by its shape: a keyword query or a question as given, a chat excerpt with
its latest turn weighted."""

from __future__ import annotations

import numpy as np
import pytest

from store.search.query_shape import (
    CHAT_MIN_WORDS,
    CONTEXT_WORDS,
    focus_of,
    query_vector,
    shape_query,
    turns_of,
)
from store.search.scoring import mix_scores

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


def test_long_single_line_split_into_sentences() -> None:
    chatter = " ".join(["we talked about the weather for a while."] * 6)
    query = f"{chatter} What did Maya adopt last spring?"
    assert len(query.split()) > CHAT_MIN_WORDS
    found = shape_query(query, focus_lexical=0.75, focus_dense=0.7)
    assert found.focus == "What did Maya adopt last spring?"


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
