"""A view of a namespace's lexical index: a base index, minus the documents that changed since it
was built, plus a small tail index of the memories added or changed since, searched as one
corpus, optionally with each memory's context (``store.lexical.chain``).
``store.lexical.cache`` keeps the views current and merges the tail into the base when it
grows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cached_property

import numpy as np

from store.lexical import bm25
from store.lexical.chain import Chain, Floats32, chained_top_k, context_scores, view_predecessors
from store.lexical.columns import Ints
from store.lexical.index import LexicalIndex, Scope, part_weights, search_parts, tokenize
from store.requests import SearchFilters

__all__ = ["LexicalView"]


class LexicalView:
    """A base index, minus its ``dead`` documents, plus an optional tail of newer ones, searched
    as one corpus.

    The tail must not repeat the live base's memory_ids (``store.lexical.cache`` ensures it).
    Approximations, all gone once the base is rebuilt: each part keeps its own average document
    length and dead documents still count in the base's statistics (the IDF is corrected to
    the union's); a session with memories in both parts is scored as two session documents and
    keeps the better score, and counts twice in the session IDF; the session documents of the
    base still hold the words of its dead documents. Context scores (``search(context=...)``)
    have none of these: they are counted over the live memories of both parts as one corpus.
    """

    def __init__(
        self,
        base: LexicalIndex,
        tail: LexicalIndex | None = None,
        *,
        dead: Ints | None = None,
    ) -> None:
        self.base = base
        self.tail = tail if tail is not None and len(tail) else None
        self.dead = dead if dead is not None and dead.size else None
        self._indexes = [base] if self.tail is None else [base, self.tail]
        self.tail_size = 0 if self.tail is None else len(self.tail)
        self.dead_count = 0 if self.dead is None else int(self.dead.size)

    def search(
        self,
        query: str,
        k: int,
        among: frozenset[int] | None = None,
        filters: SearchFilters | None = None,
        *,
        context: float = 0.0,
    ) -> dict[int, float]:
        """Like `LexicalIndex.search`, over base and tail; ``among`` restricts the memories,
        and so do ``filters`` as far as the index holds them. A ``context`` weight above 0
        also scores each memory with the one before it in its session (`_search_chained`)."""
        scopes = [
            Scope(
                dead=self.dead if index is self.base else None,
                allowed=None if filters is None else index.facets.allowed(filters),
            )
            for index in self._indexes
        ]
        terms = tokenize([query])[0]
        if context > 0.0:
            scoped = list(zip(self._indexes, scopes, strict=True))
            return _search_chained(scoped, terms, k, self.chain, context, among)
        parts = [
            (index.memory_part, scope) for index, scope in zip(self._indexes, scopes, strict=True)
        ]
        return search_parts(parts, terms, k, among)

    @cached_property
    def chain(self) -> Chain:
        """Base and tail rows as one row space, chained by session (see `Chain`)."""
        base, k1, b = self.base.columns, self.base.k1, self.base.b
        if self.tail is None and self.dead is None:
            return Chain(base.keys, base.tokens.lengths, self.base.before, k1=k1, b=b)
        tail = None if self.tail is None else self.tail.columns
        parts = [base] if tail is None else [base, tail]
        return Chain(
            keys=np.concatenate([columns.keys for columns in parts]),
            lengths=np.concatenate([columns.tokens.lengths for columns in parts]),
            before=view_predecessors(base, self.base.before, dead=self.dead, tail=tail),
            dead=self.dead,
            k1=k1,
            b=b,
        )

    def idf(self, terms: Iterable[str]) -> dict[str, float]:
        """Return each term's BM25 IDF over the view's memories (a term none holds: the
        highest there is). Dead base documents still count, as in the base's own scores."""
        n_docs = len(self)
        found = {}
        for term in terms:
            df = 0
            for index in self._indexes:
                term_id = index.vocab.get(term)
                if term_id is not None:
                    postings = index.memory_part.postings
                    df += int(postings.indptr[term_id + 1] - postings.indptr[term_id])
            found[term] = bm25.idf(min(df, n_docs), n_docs)
        return found

    def holding(
        self, memory_ids: Sequence[int], terms: Iterable[str], *, context: bool = False
    ) -> dict[int, frozenset[str]]:
        """Return which of ``terms`` (tokens, as `tokenize` makes them) each live memory of
        ``memory_ids`` holds, with the memory before it in its session's when ``context`` (its
        context document, as `search(context=...)` reads it). A few memories at a time: each
        (memory, term) is one binary search of the term's postings."""
        rows = self._rows_of(memory_ids)
        before = self.chain.before if context else None
        terms = list(dict.fromkeys(terms))
        found = {}
        for memory_id, row in rows.items():
            read = [row]
            if before is not None and before[row] >= 0:
                read.append(int(before[row]))
            found[memory_id] = frozenset(
                term for term in terms if any(self._row_holds(r, term) for r in read)
            )
        return found

    def _rows_of(self, memory_ids: Iterable[int]) -> dict[int, int]:
        """Return memory_id -> its live row (base rows, then tail rows) for those indexed."""
        wanted = np.asarray(list(memory_ids), dtype=np.int64)
        rows: dict[int, int] = {}
        offset = 0
        for index in self._indexes:
            keys = index.columns.keys  # ascending
            places = np.searchsorted(keys, wanted).tolist()
            for memory_id, at in zip(wanted.tolist(), places, strict=True):
                if at < len(keys) and int(keys[at]) == memory_id:
                    rows[memory_id] = offset + at
            offset += len(index)
        if self.dead is not None and rows:
            dead = set(np.intersect1d(np.fromiter(rows.values(), np.int64), self.dead).tolist())
            rows = {mid: row for mid, row in rows.items() if row not in dead}
        return rows

    def _row_holds(self, row: int, term: str) -> bool:
        """Whether the memory of chain row ``row`` holds ``term``."""
        for index in self._indexes:
            if row < len(index):
                term_id = index.vocab.get(term)
                if term_id is None:
                    return False
                postings = index.memory_part.postings
                start, end = int(postings.indptr[term_id]), int(postings.indptr[term_id + 1])
                at = start + int(np.searchsorted(postings.indices[start:end], row))
                return at < end and int(postings.indices[at]) == row
            row -= len(index)
        return False

    def search_sessions(self, query: str, k: int) -> dict[str, float]:
        """Like `LexicalIndex.search_sessions`, over base and tail."""
        parts = [(index.session_part, None) for index in self._indexes]
        return search_parts(parts, tokenize([query])[0], k)

    def __len__(self) -> int:
        return sum(len(index) for index in self._indexes) - self.dead_count


def _search_chained(
    parts: Sequence[tuple[LexicalIndex, Scope]],
    terms: list[str],
    k: int,
    chain: Chain,
    weight: float,
    among: frozenset[int] | None = None,
) -> dict[int, float]:
    """Like `search_parts` over the indexes' memories, each memory scored max(own / best
    own, ``weight`` x context / best context), where its context document is its own followed
    by the memory before it (``store.lexical.chain``); the result divided by its best again."""
    if k <= 0 or not terms:
        return {}
    memory_parts = [(index.memory_part, scope) for index, scope in parts]
    own = np.concatenate(
        [
            part.scores(weights)
            for (part, _), weights in zip(
                memory_parts, part_weights(memory_parts, terms), strict=True
            )
        ]
    )
    if chain.dead is not None:
        own[chain.dead] = 0.0
    holding = [(float(count), *_live_counts(parts, term)) for term, count in Counter(terms).items()]
    context = context_scores(holding, chain)
    # The filters and ``among`` narrow what a search returns, not where context comes from.
    outside = None
    if any(scope.allowed is not None for _, scope in parts):
        outside = ~np.concatenate(
            [
                np.ones(len(index), np.bool_) if scope.allowed is None else scope.allowed
                for index, scope in parts
            ]
        )
    if among is not None:
        not_among = ~np.isin(chain.keys, np.asarray(list(among)))
        outside = not_among if outside is None else outside | not_among
    return chained_top_k(own, context, chain, k, weight, outside=outside)


def _live_counts(parts: Sequence[tuple[LexicalIndex, Scope]], term: str) -> tuple[Ints, Floats32]:
    """The live rows (base rows, then tail rows) holding ``term``, and how often each does."""
    rows, counts, offset = [], [], 0
    for index, scope in parts:
        term_id = index.vocab.get(term)
        if term_id is not None:
            docs, tf = bm25.term_frequencies(
                index.memory_part.postings,
                term_id,
                index.columns.tokens.lengths,
                k1=index.k1,
                b=index.b,
                avg_len=index.avg_len,
            )
            if scope.dead is not None:
                live = ~np.isin(docs, scope.dead)
                docs, tf = docs[live], tf[live]
            rows.append(offset + docs.astype(np.int64))
            counts.append(tf)
        offset += len(index)
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(rows), np.concatenate(counts)
