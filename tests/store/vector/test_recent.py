"""RecentEmbeddings: a text asked for again is not embedded again; the oldest texts go first;
the vectors are the inner embedder's, row for row; no text is kept."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.vector.embedder import FloatMatrix
from store.vector.recent import RecentEmbeddings
from tests.helpers.fake_embedder import FakeEmbedder


class Counting(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        self.asked.extend(texts)
        return super().embed(texts)


def test_a_text_is_embedded_once_and_rows_keep_their_order() -> None:
    inner = Counting()
    recent = RecentEmbeddings(inner, size=10)
    first = recent.embed(["tea in the morning", "a hike with Tom"])
    again = recent.embed(["a hike with Tom", "new text", "tea in the morning", "new text"])
    assert inner.asked == ["tea in the morning", "a hike with Tom", "new text"]
    expected = inner.embed(["a hike with Tom", "new text", "tea in the morning", "new text"])
    np.testing.assert_array_equal(again, expected)
    np.testing.assert_array_equal(first[0], again[2])
    assert (recent.hits, recent.misses) == (2, 4)
    assert (recent.model_id, recent.dim) == (inner.model_id, inner.dim)


def test_the_least_recently_used_text_goes_first_and_no_text_is_kept() -> None:
    inner = Counting()
    recent = RecentEmbeddings(inner, size=2)
    recent.embed(["one", "two"])
    recent.embed(["one"])  # "one" is now the more recent
    recent.embed(["three"])  # "two" goes
    inner.asked.clear()
    recent.embed(["one", "two", "three"])
    assert inner.asked == ["two"]
    kept = b"".join(recent._vectors)  # the keys: digests only
    assert b"one" not in kept
    assert b"three" not in kept
