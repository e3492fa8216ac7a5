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

That reading alone loses a memory that the excerpt as a whole is about while its latest turn
is small talk ("it was a rough week."), the usual case when a user tells what is happening
to them. So a chat is also read as given, a second *reading* (``Reading``): BM25 over the
whole text and its embedding (and its tail's, words and meaning, when the text is longer
than the model reads). Each memory keeps the better of its match under the readings
(``store.search.ranking.rank``). A chat whose latest turn asks nothing is about the whole
excerpt: the focus's reading is weighted by ``chat_aside`` (0.5). One whose latest turn asks
a question is about that question as far as the question leaves the chat's subject: the
excerpt's readings are weighted by ``chat_aside`` when the question's embedding is far from
the earlier turns' (cosine <= FOLLOWS_FROM), fully when it is near (>= FOLLOWS_TO), and in
between on a line (``weigh``): "do you think the vet will find out why my cat stopped
eating?" after the user told of the vet visit goes on with the chat (cosine 0.8 with
MiniLM); "do you remember how my cello lessons started?" after talk of work leaves it
(0.16). Turns the excerpt quotes are its *echoes*: the excerpt's reading gives them nothing.

A keyword query, a question or a paragraph (one line, however long) is searched as given,
one reading and one embedding: a memory's own text used as a query is read as it was
embedded, so it is its own nearest vector.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from store.lexical.index import tokenize
from store.text import content_hash

Vector = npt.NDArray[np.float32]

# The focus grows backwards, turn by turn, until it has this many words.
FOCUS_MIN_WORDS = 6
# Words of the excerpt's end that the context embedding reads (MiniLM reads 256 tokens).
CONTEXT_WORDS = 150
# A question that ends a chat follows it (its excerpt read fully) by the cosine of its
# embedding with the earlier turns': not at all up to FOLLOWS_FROM, fully from FOLLOWS_TO.
# Chosen on the tune halves of LoCoMo chat and telling and of FriendsQA chats (docs/retrieval.md).
FOLLOWS_FROM = 0.3
FOLLOWS_TO = 0.6

_WORD = re.compile(r"\w+")
_SPEAKER = re.compile(r"[^:\n]{1,40}:\s+")


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One way to read a query: the texts BM25 searches, the texts embedded into one query
    vector, each with its weight, and the weight of the relevance this reading gives."""

    lexical: tuple[tuple[str, float], ...]  # (text BM25 searches, the weight of its scores)
    dense: tuple[tuple[str, float], ...]  # (text to embed, its weight in the query vector)
    weight: float = 1.0


@dataclass(frozen=True, kw_only=True)
class QueryShape:
    """How one query is searched: its readings, the first the main one (the focus)."""

    text: str  # the query as given
    focus: str  # the latest turn(s) of a chat; the whole query otherwise
    lexical: tuple[tuple[str, float], ...]  # the main reading's
    dense: tuple[tuple[str, float], ...]  # the main reading's
    weight: float = 1.0  # the main reading's
    also: tuple[Reading, ...] = ()  # a chat's other readings: the excerpt as given
    echoes: frozenset[str] = frozenset()  # content hashes of the earlier turns (see `echoes_of`)
    # A chat ending in a question: (its focus, its earlier turns), whose similarity sets the
    # excerpt readings' weight (`weigh`); None when their weight is already set.
    follows: tuple[str, str] | None = None
    aside: float = 1.0  # the excerpt readings' weight when the question leaves the chat

    @property
    def chat(self) -> bool:
        return self.focus != self.text

    @property
    def readings(self) -> tuple[Reading, ...]:
        return (Reading(lexical=self.lexical, dense=self.dense, weight=self.weight), *self.also)


def turns_of(query: str) -> list[str]:
    """Split a query into turns: its non-empty lines. One line, however long, is one turn: a
    paragraph (a summary, a memory's own text) is no chat."""
    return [line.strip() for line in query.splitlines() if line.strip()]


def focus_of(turns: Sequence[str]) -> int:
    """Return where the focus starts: the last turn, extended back to FOCUS_MIN_WORDS words."""
    start = len(turns) - 1
    while start > 0 and sum(_words(turn) for turn in turns[start:]) < FOCUS_MIN_WORDS:
        start -= 1
    return start


def shape_query(
    query: str, *, focus_lexical: float, focus_dense: float, aside: float | None = None
) -> QueryShape:
    """Return how to search ``query``: as given, or as a chat excerpt with its focus weighted.

    ``focus_lexical`` is the focus's share of the lexical score (the earlier turns have the
    rest); ``focus_dense`` its share of the query vector (0 = the excerpt only). ``aside``
    (None: the focus reading alone) adds the reading of the excerpt as given (with its tail as
    a reading of its own when the excerpt is longer than the embedder reads) and weighs the
    reading that is not the chat's subject: the focus's when the latest turn asks nothing;
    when it asks a question, the excerpt's, by ``aside`` until `weigh` sets how far the
    question follows the chat.
    """
    text = query.strip()
    turns = turns_of(text)
    start = focus_of(turns) if len(turns) > 1 else 0
    if start == 0:
        return QueryShape(text=text, focus=text, lexical=((text, 1.0),), dense=((text, 1.0),))
    focus = "\n".join(turns[start:])
    earlier = "\n".join(turns[:start])
    tail = _tail(turns, CONTEXT_WORDS)
    also: list[Reading] = []
    weight = 1.0
    question = asks(turns[-1])
    if aside is not None:
        excerpt = aside if question else 1.0
        weight = 1.0 if question else aside
        also.append(Reading(lexical=((text, 1.0),), dense=((text, 1.0),), weight=excerpt))
        if tail != text:
            also.append(Reading(lexical=((tail, 1.0),), dense=((tail, 1.0),), weight=excerpt))
    return QueryShape(
        text=text,
        focus=focus,
        lexical=_weighted(focus, earlier, focus_lexical),
        dense=_weighted(focus, tail, focus_dense),
        weight=weight,
        also=tuple(also),
        echoes=echoes_of(turns[:start]) if also else frozenset(),
        follows=(focus, earlier) if also and question else None,
        aside=aside if aside is not None else 1.0,
    )


def follows_share(similarity: float) -> float:
    """How far (0-1) a chat's closing question follows the chat, by the cosine of its
    embedding with the earlier turns'."""
    return min(1.0, max(0.0, (similarity - FOLLOWS_FROM) / (FOLLOWS_TO - FOLLOWS_FROM)))


def weigh(shape: QueryShape, embed: Callable[[str], Vector]) -> QueryShape:
    """Return ``shape`` with its excerpt readings weighted by how far its closing question
    follows the chat: ``aside`` if not at all, 1 if fully (a shape without such a question is
    returned as it is). ``embed`` embeds the focus and the earlier turns."""
    if shape.follows is None:
        return shape
    focus, earlier = shape.follows
    similarity = float(np.dot(embed(focus), embed(earlier)))
    weight = shape.aside + (1.0 - shape.aside) * follows_share(similarity)
    return replace(shape, also=tuple(replace(r, weight=weight) for r in shape.also), follows=None)


def _unlabelled(turn: str) -> str:
    label = _SPEAKER.match(turn)
    return turn[label.end() :] if label else turn


def asks(turn: str) -> bool:
    """Tell whether a turn asks a question (it holds a question mark)."""
    return "?" in turn


def echoes_of(turns: Sequence[str]) -> frozenset[str]:
    """Return the content hashes of a chat's earlier turns, each as given and without a leading
    "speaker:" label. A memory with one of them is an *echo*: the excerpt quotes it (a
    companion that stores its chat as it goes holds the very turns an agent searches with),
    so reading the excerpt as given must not find it; the focus still may."""
    found = set()
    for turn in turns:
        found.add(content_hash(turn))
        found.add(content_hash(_unlabelled(turn)))
    return frozenset(found)


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


# A chat's turn of fewer BM25 terms says too little to be a term set of its own ("yeah, sure").
TURN_MIN_TERMS = 3


def query_terms(shape: QueryShape) -> tuple[frozenset[str], ...]:
    """Return the query's BM25 terms as sets: of the whole query; of a chat's focus too, and
    of each of its turns of at least TURN_MIN_TERMS terms besides its "speaker:" label (a
    memory may answer any one of them: the one where the user says what happened)."""
    if shape.focus == shape.text:
        return (frozenset(tokenize([shape.text])[0]),)
    turns = [_unlabelled(turn) for turn in turns_of(shape.text)]
    sets = [frozenset(tokens) for tokens in tokenize([shape.text, shape.focus, *turns])]
    whole, focus, each = sets[0], sets[1], sets[2:]
    return (whole, focus, *(terms for terms in each if len(terms) >= TURN_MIN_TERMS))


def query_vector(shape: QueryShape | Reading, embed: Callable[[str], Vector]) -> Vector:
    """Return the query vector of a reading (a shape's main one): one embedding, or the
    weighted mix of a chat's two, unit length.

    The cosine of a memory with the mix is the same mix of its cosines with the parts.
    """
    if len(shape.dense) == 1:
        return embed(shape.dense[0][0])
    mixed = sum(weight * embed(text) for text, weight in shape.dense)
    vector = np.asarray(mixed, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
