"""What a query asks, by its shape: a keyword query, a question, or a chat excerpt (pure).

An agent often searches with the last turns of its conversation. Read whole, such a query is
mostly chatter: BM25 follows every word of every turn, and the embedder reads only the first
256 tokens, i.e. the oldest turns. So a query of several lines (or a long single paragraph) is
split into turns, and its *focus*, the latest turn (with the one before when the latest is too
short to say much: "and when was that?"), is weighted on purpose:

- BM25 searches the focus and the earlier turns apart, and each memory's lexical score is
  ``chat_focus_lexical`` x its normalised score for the focus + the rest x its score for the
  earlier turns: a memory that repeats the chatter (often the chat's own turns, stored as
  memories) matches the earlier turns perfectly, and would otherwise set the scale that every
  answer to the question is divided by;
- the query vector is ``chat_focus_dense`` x the focus's embedding + the rest x the embedding
  of the excerpt's tail (the latest ~``CONTEXT_WORDS`` words, so the model sees the end of the
  chat, not its beginning), renormalised: its cosine with a memory is the same mix of the two
  cosines;
- periods ("last May") are read from the focus only: chatter says "today" and "this week".

A keyword query or a question is one short line: it is searched as given, one embedding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]

# A one-line query of more words than this is read as chat (split into sentences).
CHAT_MIN_WORDS = 40
# The focus grows backwards, turn by turn, until it has this many words.
FOCUS_MIN_WORDS = 6
# Words of the excerpt's end that the context embedding reads (MiniLM reads 256 tokens).
CONTEXT_WORDS = 150

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, kw_only=True)
class QueryShape:
    """How one query is searched: the text BM25 reads, the texts embedded and their weights."""

    text: str  # the query as given
    focus: str  # the latest turn(s) of a chat; the whole query otherwise
    lexical: tuple[tuple[str, float], ...]  # (text BM25 searches, the weight of its scores)
    dense: tuple[tuple[str, float], ...]  # (text to embed, its weight in the query vector)

    @property
    def chat(self) -> bool:
        return self.focus != self.text


def turns_of(query: str) -> list[str]:
    """Split a query into turns: its non-empty lines, or the sentences of one long line."""
    lines = [line.strip() for line in query.splitlines() if line.strip()]
    if len(lines) == 1 and _words(lines[0]) > CHAT_MIN_WORDS:
        return [s for s in _SENTENCE_END.split(lines[0]) if s.strip()]
    return lines


def focus_of(turns: Sequence[str]) -> int:
    """Return where the focus starts: the last turn, extended back to FOCUS_MIN_WORDS words."""
    start = len(turns) - 1
    while start > 0 and sum(_words(turn) for turn in turns[start:]) < FOCUS_MIN_WORDS:
        start -= 1
    return start


def shape_query(query: str, *, focus_lexical: float, focus_dense: float) -> QueryShape:
    """Return how to search ``query``: as given, or as a chat excerpt with its focus weighted.

    ``focus_lexical`` is the focus's share of the lexical score (the earlier turns have the
    rest); ``focus_dense`` its share of the query vector (0 = the excerpt only).
    """
    text = query.strip()
    turns = turns_of(text)
    start = focus_of(turns) if len(turns) > 1 else 0
    if start == 0:
        return QueryShape(text=text, focus=text, lexical=((text, 1.0),), dense=((text, 1.0),))
    focus = "\n".join(turns[start:])
    earlier = "\n".join(turns[:start])
    return QueryShape(
        text=text,
        focus=focus,
        lexical=_weighted(focus, earlier, focus_lexical),
        dense=_weighted(focus, _tail(turns, CONTEXT_WORDS), focus_dense),
    )


def _weighted(focus: str, rest: str, share: float) -> tuple[tuple[str, float], ...]:
    weight = min(1.0, max(0.0, share))
    return tuple((t, w) for t, w in ((focus, weight), (rest, 1.0 - weight)) if w > 0)


def _tail(turns: Sequence[str], limit: int) -> str:
    """Return the latest turns that fit in ``limit`` words (at least the last turn)."""
    kept: list[str] = []
    words = 0
    for turn in reversed(turns):
        words += _words(turn)
        if kept and words > limit:
            break
        kept.append(turn)
    return "\n".join(reversed(kept))


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def query_vector(shape: QueryShape, embed: Callable[[str], Vector]) -> Vector:
    """Return the query vector: one embedding, or the weighted mix of a chat's two, unit length.

    The cosine of a memory with the mix is the same mix of its cosines with the parts.
    """
    if len(shape.dense) == 1:
        return embed(shape.dense[0][0])
    mixed = sum(weight * embed(text) for text, weight in shape.dense)
    vector = np.asarray(mixed, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
