"""Tests of store.text: sentence splitting and content hashing."""

from __future__ import annotations

import hashlib

import pytest

from store.text import content_hash, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Hello there my friend. How are you doing today? I am fine!",
            ["Hello there my friend.", "How are you doing today?", "I am fine!"],
        ),
        ("One sentence only.", ["One sentence only."]),
        ("No final punctuation at all", ["No final punctuation at all"]),
        (
            "  Leading and trailing space.   Then another sentence here.  ",
            ["Leading and trailing space.", "Then another sentence here."],
        ),
    ],
)
def test_split_sentences_plain_text_splits_on_terminal_punctuation(
    text: str, expected: list[str]
) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Mr. Smith went to Washington. He met Dr. Jones there.",
            ["Mr. Smith went to Washington.", "He met Dr. Jones there."],
        ),
        (
            "I like fruit, e.g. apples and pears. But not bananas at all.",
            ["I like fruit, e.g. apples and pears.", "But not bananas at all."],
        ),
        (
            "She lives in the U.S. now. He never moved there.",
            ["She lives in the U.S. now.", "He never moved there."],
        ),
        ("Ask J. R. Tolkien about it please.", ["Ask J. R. Tolkien about it please."]),
        (
            "Version 3.5 was released. It fixed the parser.",
            ["Version 3.5 was released.", "It fixed the parser."],
        ),
    ],
)
def test_split_sentences_abbreviations_and_numbers_do_not_split(
    text: str, expected: list[str]
) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes. I went to Paris yesterday.", ["Yes. I went to Paris yesterday."]),
        ("I went to Paris yesterday. Ok.", ["I went to Paris yesterday. Ok."]),
        ("Fine. Ok.", ["Fine. Ok."]),
        (
            '"Really?" she asked me twice. Then she left the room.',
            ['"Really?" she asked me twice.', "Then she left the room."],
        ),
        (
            "Wait... what did you just say? I did not hear it.",
            ["Wait... what did you just say?", "I did not hear it."],
        ),
    ],
)
def test_split_sentences_short_fragments_merge_with_neighbour(
    text: str, expected: list[str]
) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_blank_line_splits_paragraphs() -> None:
    text = "First paragraph has no end\n\n  Second paragraph is here too"
    assert split_sentences(text) == ["First paragraph has no end", "Second paragraph is here too"]


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t"])
def test_split_sentences_blank_text_returns_nothing(text: str) -> None:
    assert split_sentences(text) == []


def test_split_sentences_pieces_are_substrings_in_order() -> None:
    text = "The cat sat down. Then it slept for hours!\n\nLater the dog came in. It barked."
    pieces = split_sentences(text)
    position = 0
    for piece in pieces:
        position = text.index(piece, position) + len(piece)
    assert len(pieces) == 3


def test_content_hash_whitespace_variants_hash_equal() -> None:
    assert content_hash("  likes   green\n\ttea ") == content_hash("likes green tea")


def test_content_hash_case_differs_hash_differs() -> None:
    assert content_hash("Likes green tea") != content_hash("likes green tea")


def test_content_hash_value_is_sha256_of_normalised_text() -> None:
    expected = hashlib.sha256(b"likes green tea").hexdigest()
    assert content_hash(" likes  green tea\n") == expected
