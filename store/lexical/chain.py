"""The memory before each memory in its session, and the BM25 score of the two together.

A dialogue turn often answers the turn before it ("Yes! It was amazing."): the question's words
are in that turn, not in the answer. So besides its own document a memory has a *context*
document, its own tokens followed by those of the memory before it in the same session (by
event time, then id); the lexical evidence keeps the better of its own BM25 score and
``weight`` x its context's, each divided by its best (`chained_top_k`, which
``store.lexical.view`` searches with). A memory without a session, or first in its session, is
its own context.

Nothing here is saved: the chain is derived from an index's columns, once per base, and a view
(base minus its dead documents plus a tail) re-chains only the sessions its changes touch. The
context documents are never built either: a query's terms are counted in the postings of the
memories' own documents and added up along the chain (``context_scores``), so a forgotten
memory's words reach no other document and a memory put between two others changes no indexed
document.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from store.lexical import bm25
from store.lexical.bm25 import idf
from store.lexical.columns import Columns, Int32s, Ints

__all__ = [
    "Chain",
    "chained_top_k",
    "context_scores",
    "predecessors",
    "view_predecessors",
]

NONE = -1
# A memory this long after the one before it in its session starts afresh: a session id kept for
# months (one per user, say) must not chain unrelated events. A sitting's turns are minutes
# apart, and LoCoMo's share their session's time.
MAX_GAP_US = 12 * 3600 * 1_000_000
# A term in more than 1 / COMMON of the rows is scored by passes over every row. Per term, at
# 1M rows: 0.4 ms gathering the rows of one in 1/128 of them, 6 ms for 1/16, 9 ms for 1/4,
# against 3-3.5 ms for the passes; at 100k, even at 1/16 (0.2 ms each way).
COMMON = 16
Floats = npt.NDArray[np.float64]
Floats32 = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class Chain:
    """The memory rows of a view as one row space (base rows, then tail rows): each row's key,
    its length in tokens and the row before it in its session (-1: none). ``dead`` rows are
    out of the corpus: no row's predecessor, with none of their own."""

    keys: Ints
    lengths: Ints
    before: Ints
    k1: float  # the BM25 parameters of the index
    b: float
    dead: Ints | None = None

    @cached_property
    def before_or_blank(self) -> Ints:
        """``before`` with "none" as ``len(before)``: a blank slot past the last row."""
        out: Ints = np.where(self.before >= 0, self.before, len(self.before))
        return out

    @cached_property
    def after_or_blank(self) -> Ints:
        """Each row's successor in its session ("none": ``len(before)``, as above)."""
        after = np.full(len(self.before), len(self.before), dtype=np.int64)
        has = np.flatnonzero(self.before >= 0)
        after[self.before[has]] = has
        return after

    @cached_property
    def n_live(self) -> int:
        """How many rows are live (the context corpus's size)."""
        return len(self.keys) - (0 if self.dead is None else int(self.dead.size))

    @cached_property
    def norm(self) -> Floats32:
        """Each context document's BM25 length normalisation, k1 x (1 - b + b x its length /
        the live ones' mean length); a context document's length is its row's plus its
        predecessor's."""
        lengths = np.append(self.lengths.astype(np.float64), 0.0)
        context: Floats = lengths[:-1] + lengths[self.before_or_blank]
        total = float(context.sum())
        if self.dead is not None:
            total -= float(context[self.dead].sum())
        avg_len = total / self.n_live if self.n_live else 1.0
        context *= self.b / avg_len
        context += 1 - self.b
        context *= self.k1
        return context.astype(np.float32)


def predecessors(sessions: Int32s, event_us: Ints, keys: Ints) -> Ints:
    """For each row, the row before it in its session by (event time, key); -1 for the first
    row of a session, for rows without one (a session code below 0), and for a row more than
    `MAX_GAP_US` after the one before it."""
    out = np.full(len(keys), NONE, dtype=np.int64)
    rows = np.flatnonzero(sessions >= 0)
    if rows.size < 2:
        return out
    order = rows[np.lexsort((keys[rows], event_us[rows], sessions[rows]))]
    later, earlier = order[1:], order[:-1]
    same = sessions[later] == sessions[earlier]
    same &= event_us[later] - event_us[earlier] <= MAX_GAP_US
    out[later[same]] = earlier[same]
    return out


def view_predecessors(
    base: Columns,
    base_chain: Ints,
    *,
    dead: Ints | None = None,
    tail: Columns | None = None,
) -> Ints:
    """The chain of a view: ``predecessors`` over the live base rows and the tail's rows as
    one set, the tail's row ``i`` at position ``len(base) + i``.

    ``base_chain`` is the base's own chain. Only the sessions of dead rows and of tail rows
    are chained again; dead rows have no predecessor.
    """
    n_base = len(base)
    n_tail = 0 if tail is None else len(tail)
    out = np.concatenate((base_chain, np.full(n_tail, NONE, dtype=np.int64)))
    touched: dict[str, int] = {}
    if dead is not None and dead.size:
        _add_names(touched, base.session.codes[dead], base.session.names)
    if tail is not None:
        _add_names(touched, tail.session.codes, tail.session.names)
    if not touched:
        return out
    base_ids = _renumber(base.session.codes, base.session.names, touched)
    base_rows = np.flatnonzero(base_ids >= 0)
    if dead is not None and dead.size:
        base_rows = np.setdiff1d(base_rows, dead, assume_unique=True)
    parts = [(base_rows, base_rows, base_ids, base)]
    if tail is not None:
        tail_ids = _renumber(tail.session.codes, tail.session.names, touched)
        tail_rows = np.flatnonzero(tail_ids >= 0)
        parts.append((tail_rows, n_base + tail_rows, tail_ids, tail))
    positions = np.concatenate([at for _, at, _, _ in parts])
    local = predecessors(
        np.concatenate([ids[rows] for rows, _, ids, _ in parts]).astype(np.int32),
        np.concatenate([cols.event_us[rows] for rows, _, _, cols in parts]),
        np.concatenate([cols.keys[rows] for rows, _, _, cols in parts]),
    )
    out[positions] = np.where(local >= 0, positions[np.maximum(local, 0)], NONE)
    if dead is not None:
        out[dead] = NONE
    return out


def _add_names(touched: dict[str, int], codes: Int32s, names: list[str]) -> None:
    for code in np.unique(codes[codes >= 0]).tolist():
        touched.setdefault(names[code], len(touched))


def _renumber(codes: Int32s, names: list[str], touched: dict[str, int]) -> Int32s:
    """The rows' sessions as numbers of ``touched`` (-1: not touched, or none)."""
    table = np.array([touched.get(name, NONE) for name in names] + [NONE], dtype=np.int32)
    out: Int32s = table[codes]  # a code of -1 reads the appended -1
    return out


def context_scores(terms: Sequence[tuple[float, Ints, Floats32]], chain: Chain) -> Floats32:
    """Score the context documents of the live rows as a corpus of their own (Lucene BM25,
    as ``store.lexical.bm25``, in float32): return every row's score (0 for dead rows).

    ``terms`` holds, per query term, its count in the query and the live rows holding it
    (each once) with how often each does.
    """
    n = len(chain.keys)
    scores = np.zeros(n, dtype=np.float32)
    # Scratch rows, cleared after each term; the last slot stands for "no row".
    count_of = np.zeros(n + 1, dtype=np.float32)
    holds = np.zeros(n + 1, dtype=np.bool_)
    holds[n] = True  # so that "no row after" is never taken for a row
    tf_buffer: Floats32 | None = None  # for common terms: whole-array steps, in place
    norm_buffer: Floats32 | None = None
    for count, rows, tf in terms:
        count_of[rows] = tf
        if rows.size * COMMON > n:  # whole-array steps beat gathering the term's rows
            if tf_buffer is None or norm_buffer is None:
                tf_buffer, norm_buffer = np.empty(n, np.float32), np.empty(n, np.float32)
            np.take(count_of, chain.before_or_blank, out=tf_buffer)
            tf_buffer += count_of[:n]
            weight = count * idf(int(np.count_nonzero(tf_buffer)), chain.n_live)
            np.add(tf_buffer, chain.norm, out=norm_buffer)
            tf_buffer /= norm_buffer
            tf_buffer *= weight
            scores += tf_buffer
        else:
            holds[rows] = True
            after = chain.after_or_blank[rows]
            # The context documents holding the term: its rows' and those of the rows after.
            holding = np.concatenate((rows, after[~holds[after]]))
            context_tf = count_of[holding] + count_of[chain.before_or_blank[holding]]
            weight = count * idf(holding.size, chain.n_live)
            scores[holding] += weight * context_tf / (context_tf + chain.norm[holding])
            holds[rows] = False
        count_of[rows] = 0.0
    return scores


def chained_top_k(
    own: Floats,
    context: Floats32,
    chain: Chain,
    k: int,
    weight: float,
    *,
    outside: npt.NDArray[np.bool_] | None = None,
) -> dict[int, float]:
    """Return up to ``k`` key -> max(own / best own, ``weight`` x context / best context),
    divided by its best, best first.

    ``own`` and ``context`` are every row's BM25 score of its own and of its context document
    (0 for dead rows; both are changed); ``outside`` rows are not returned.
    """
    if outside is not None:
        own[outside] = 0.0
        context[outside] = 0.0
    # In place: at 1M memories every pass over the rows costs about a millisecond.
    mixed = own
    for scores, share in ((own, 1.0), (context, weight)):
        best = float(scores.max()) if scores.size else 0.0
        if best > 0.0:  # (else every score is 0)
            scores *= share / best
    np.maximum(mixed, context, out=mixed)
    rows = bm25.best_rows(mixed, k)
    if not rows.size:
        return {}
    top = mixed[rows[0]]
    return {
        int(key): float(score)
        for key, score in zip(chain.keys[rows], mixed[rows] / top, strict=True)
    }
