"""The quick test that lets a forget skip the images that cannot quote it
(store.write.forget.Quotes).

A forget reads a namespace's record images as JSON text and decodes only those that may quote
the forgotten text, so the test must never rule out one that does, whatever JSON escapes.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.write import forget
from store.write.forget import FORGOTTEN, SHINGLE, Quotes

# Characters JSON writes escaped: quotes, backslashes, control and non-ASCII characters.
TRICKY = st.text(alphabet=st.sampled_from([*'ab "\\\n\té€😀/', chr(0x1F)]), min_size=1, max_size=60)


@settings(max_examples=300)
@given(secret=st.one_of(TRICKY, st.text(min_size=1, max_size=60)), data=st.data())
def test_json_holding_a_quoting_string_is_never_ruled_out(secret: str, data: st.DataObject) -> None:
    # A run of the text, a few characters longer at most (the whole text if shorter than a
    # run), within a longer string.
    size = min(len(secret), SHINGLE)
    start = data.draw(st.integers(0, len(secret) - size))
    end = data.draw(st.integers(start + size, min(len(secret), start + size + 3)))
    quoted = data.draw(st.text(max_size=8)) + secret[start:end] + data.draw(st.text(max_size=8))
    image = {"content": quoted, "tags": ["x", quoted], "importance": 5}
    quotes = Quotes([secret])
    assert quotes.scrub(image) != image
    for ascii_only in (True, False):
        assert quotes.may_quote(None, json.dumps(image, ensure_ascii=ascii_only))


def test_json_without_a_run_of_the_text_is_ruled_out() -> None:
    secret = "Zoë's café key is under the señor's blue mat by the door"
    quotes = Quotes([secret])
    # Words of it, even a piece of half a run, but no run of SHINGLE characters.
    other = {"content": "Zoë's café is open; under the señor's hat", "tags": ["café"]}
    assert quotes.scrub(other) == other
    assert not quotes.may_quote(json.dumps(other), json.dumps(other, ensure_ascii=False))
    quoting = {"content": f"she said {secret[3:30]}"}
    assert quotes.scrub(quoting) == {"content": FORGOTTEN}
    assert quotes.may_quote(None, json.dumps(quoting))
    assert not quotes.may_quote(None, None)


def test_too_many_texts_to_look_for_means_every_image_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(forget, "MAX_PIECES", 10)
    quotes = Quotes([f"memory number {n} of a namespace forgotten whole" for n in range(5)])
    assert quotes.may_quote('{"content": "walked the dog"}')
    assert not quotes.may_quote(None)
