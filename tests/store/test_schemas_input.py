"""Input text that is not Unicode: a lone surrogate (JSON's "\\ud800", or a byte that is not
UTF-8 on a command line) in any field an item, an edit or a search carries is a problem naming
the field, never a failure to encode it later."""

from __future__ import annotations

import json
from typing import Any

import pytest

from store.errors import ValidationFailed
from store.requests import lone_surrogate, search_request
from store.schemas import Limits, LogIn, MemoryIn, parse_items, parse_patch

LINE = {"session_id": "s1", "role": "user", "content": "hi", "timestamp": "2026-03-01T12:00:00Z"}


def encodable(problems: list[tuple[str, str]]) -> bool:
    """Whether every problem can be printed or sent as UTF-8 (it escapes the surrogate)."""
    return all(f"{where}: {what}".encode() for where, what in problems)


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ({"content": "caf\ud800"}, "content: holds a lone surrogate (\\ud800) at character 4"),
        ({"content": "x", "metadata": {"k": "\ud800"}}, "metadata: value at k holds"),
        ({"content": "x", "metadata": {"a": [1, {"b": "\udfff"}]}}, "metadata: value at a.1.b"),
        ({"content": "x", "metadata": {"k\ud800": 1}}, "metadata: key 'k\\ud800' holds"),
        (
            {"content": "x", "metadata": {"a": {"{b}\ud800": 1}}},
            "metadata: key '{b}\\ud800' at a holds",
        ),
        ({"content": "x", "tags": ["ok", "\ud800"]}, "tags: value at 1 holds"),
        ({"content": "x", "type": "\ud800"}, "type: holds"),
        ({"content": "x", "external_id": "id\ud800"}, "external_id: holds"),
        ({"content": "x", "session_id": "\ud800"}, "session_id: holds"),
        ({"content": "x", "timestamp": "2026\ud800"}, "timestamp: holds"),
        ({"content": "x", "\ud800": 1}, "field name '\\ud800' holds"),
        (
            {"content": "caf\udce9"},
            "content: holds a lone surrogate (\\udce9, or the byte 0xe9 that is not UTF-8)",
        ),
    ],
)
def test_parse_items_lone_surrogate_in_a_memory_names_the_field(
    item: dict[str, Any], problem: str
) -> None:
    parsed, problems = parse_items(MemoryIn, [item], Limits(), labels=["line 3"])

    assert parsed == []
    assert [label for label, _ in problems] == ["line 3"]
    assert problems[0][1].startswith(problem), problems
    assert problems[0][1].endswith(": not Unicode text")
    assert encodable(problems)


@pytest.mark.parametrize("field", ["session_id", "role", "content", "idempotency_key", "pair_id"])
def test_parse_items_lone_surrogate_in_a_log_line_names_the_field(field: str) -> None:
    parsed, problems = parse_items(LogIn, [{**LINE, field: "a\ud800"}], Limits())

    assert parsed == []
    assert problems == [
        ("item 0", f"{field}: holds a lone surrogate (\\ud800) at character 2: not Unicode text")
    ]


def test_parse_items_a_surrogate_pair_from_json_is_one_character_and_fine() -> None:
    item = json.loads('{"content": "smile \\ud83d\\ude00", "metadata": {"\\ud83d\\ude00": 1}}')

    parsed, problems = parse_items(MemoryIn, [item], Limits())

    assert problems == []
    assert parsed[0].content == "smile \N{GRINNING FACE}"


def test_parse_patch_lone_surrogate_in_metadata_names_the_field() -> None:
    raw = json.loads('{"content": "fine", "metadata": {"notes": ["ok", "\\ud800"]}}')

    with pytest.raises(ValidationFailed) as caught:
        parse_patch(raw, Limits())

    assert caught.value.problems == [
        (
            "body.metadata",
            "value at notes.1 holds a lone surrogate (\\ud800) at character 1: not Unicode text",
        )
    ]
    str(caught.value).encode()  # the message prints


@pytest.mark.parametrize(
    ("parameters", "where"),
    [
        ({"query": "caf\udce9"}, "q"),
        ({"tags": ("\ud800",)}, "tag.0"),
        ({"types": ("event", "\ud800")}, "type.1"),
        ({"meta": ("k=\udcff",)}, "meta.0"),
    ],
)
def test_search_request_lone_surrogate_names_the_parameter(
    parameters: dict[str, Any], where: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        search_request(namespace="n", **{"query": "tea", **parameters})

    assert [place for place, _ in caught.value.problems] == [where]
    assert "lone surrogate" in caught.value.problems[0][1]
    str(caught.value).encode()


def test_lone_surrogate_of_unicode_text_is_none() -> None:
    assert lone_surrogate("caf\N{LATIN SMALL LETTER E WITH ACUTE} \N{GRINNING FACE}") is None


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ({"content": "a\x00b"}, "content: must not be blank or contain a NUL character"),
        ({"content": "x", "type": "Bad Type"}, "type: must be a lowercase name: a letter, then"),
        ({"content": "x", "session_id": "s\x00"}, "session_id: must not be blank or contain"),
    ],
)
def test_parse_items_says_what_a_pattern_asks_not_the_pattern(
    item: dict[str, Any], said: str
) -> None:
    _, problems = parse_items(MemoryIn, [item], Limits(), labels=["line 1"])

    assert [label for label, _ in problems] == ["line 1"]
    assert problems[0][1].startswith(said), problems
    assert "pattern" not in problems[0][1]
