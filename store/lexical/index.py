"""BM25 lexical index over one namespace's memories: its documents and the index.

The index is derived: SQL is the truth and the caller loads the documents. Scoring is Lucene
BM25 (``store.lexical.bm25``, bit for bit bm25s's) over Snowball-stemmed English tokens; this module
tokenises, merges and normalises. Scores are divided by the query's best score, so the best hit
is exactly 1.0.

An index is immutable: its documents are columns of arrays (``store.lexical.columns``), which a
saved index memory-maps (``store.lexical.files``), and two BM25 matrices over them, one of
memories and one of whole sessions. A view of it (``store.lexical.view``) adds the memories
added or changed since it was built.

A build reads its documents as a stream and tokenises them a chunk at a time into the columns:
a server builds while it answers requests, and a build that held every document's text and
token list at once left Python's heap fragmented and resident for good.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from itertools import islice
from typing import Any, Generic, TypeVar, cast

import bm25s
import numpy as np
import numpy.typing as npt
import Stemmer
from bm25s.stopwords import STOPWORDS_EN_PLUS

from store.lexical import bm25
from store.lexical.chain import predecessors
from store.lexical.columns import Columns, Ints
from store.lexical.facets import FacetIndex, Mask, facets_of
from store.requests import event_micros

__all__ = ["LexDoc", "LexicalIndex", "Scope", "part_weights", "search_parts", "tokenize"]

# bm25s sets its own logger to DEBUG at import, which lets its per-build debug lines through
# any root handler; only its warnings are of interest to us.
logging.getLogger("bm25s").setLevel(logging.WARNING)

# bm25s's default pattern (words of 2+ characters) plus single digits: "3 kids", "2 pm".
_TOKEN_PATTERN = r"(?u)\b\w\w+\b|\b\d\b"
# bm25s's NLTK-derived English list (179 words), not its 33-word Lucene list ("en"): on LoCoMo
# turns it lifts evidence recall@10 from 0.58 to 0.63, as chat questions are mostly pronouns
# and auxiliaries ("what did I tell you about my ...").
_STOPWORDS = "en_plus"
# Names what tokenize produces: a saved index made by another tokeniser is rebuilt.
TOKENIZER = f"bm25s-{_STOPWORDS}-snowball-english-{_TOKEN_PATTERN}"
# Chosen on one half of LoCoMo's conversations and scored on the other (bench/lexical_params):
# a gentler length normalisation than the textbook 1.5 / 0.75 suits short memories and the
# sessions' long documents alike. A saved index made with other values is rebuilt.
DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
_BUILD_CHUNK = 2000  # documents tokenised at a time by a build

# PyStemmer objects keep internal state and must not be shared between threads.
_local = threading.local()

K = TypeVar("K", int, str)


@dataclass(frozen=True, kw_only=True)
class LexDoc:
    """One memory to index: ``text`` is indexed as given (the caller prefixes the date); the
    rest is what a filter reads."""

    memory_id: int
    text: str
    session_key: str | None  # conversation session id; None = no session
    version: int = 0
    type: str = ""
    event_time: datetime | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class TokDoc:
    """A document tokenised: a row of the columns, kept so a tail rebuilds without tokenising."""

    memory_id: int
    version: int
    event_us: int
    tokens: list[str]
    facets: tuple[str, ...]
    session_key: str | None
    type: str


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Return each text as lowercased, stopword-free, Snowball-stemmed tokens (numbers kept)."""
    if not texts:
        return []
    tokens = bm25s.tokenize(
        list(texts),
        lower=True,
        token_pattern=_TOKEN_PATTERN,
        stopwords=_STOPWORDS,
        stemmer=_stemmer(),
        return_ids=False,
        show_progress=False,
    )
    return cast(list[list[str]], tokens)


_TOKEN = re.compile(_TOKEN_PATTERN)
_STOPWORD_SET = frozenset(STOPWORDS_EN_PLUS)


def term_sets(texts: Sequence[str]) -> list[frozenset[str]]:
    """Return the set of each text's `tokenize` tokens, faster for a few texts: a search's
    hits, read for their relevance (``tests/store/lexical`` checks it against `tokenize`)."""
    stemmer = _stemmer()
    found = []
    for text in texts:
        words = {word for word in _TOKEN.findall(text.lower()) if word not in _STOPWORD_SET}
        found.append(frozenset(stemmer.stemWords(sorted(words))))
    return found


def tokenise_docs(docs: Sequence[LexDoc]) -> list[TokDoc]:
    """Tokenise documents (one tokenizer call for all of them)."""
    tokens = tokenize([doc.text for doc in docs])
    return [
        TokDoc(
            memory_id=doc.memory_id,
            version=doc.version,
            event_us=0 if doc.event_time is None else event_micros(doc.event_time),
            tokens=doc_tokens,
            facets=facets_of(doc.tags, doc.metadata),
            session_key=doc.session_key,
            type=doc.type,
        )
        for doc, doc_tokens in zip(docs, tokens, strict=True)
    ]


def _tokenise_stream(docs: Iterable[LexDoc]) -> Iterator[TokDoc]:
    stream = iter(docs)
    while chunk := list(islice(stream, _BUILD_CHUNK)):
        yield from tokenise_docs(chunk)


def release_free_memory() -> None:
    """Return the C heap's free pages to the OS (glibc's malloc_trim); elsewhere do nothing."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)  # glibc only: musl and macOS lack it


_malloc_trim = _find_malloc_trim()


class _Part(Generic[K]):
    """One BM25 matrix of an index over keyed documents (memories or whole sessions)."""

    def __init__(self, keys: npt.NDArray[Any], postings: bm25.Postings, vocab: dict[str, int]):
        self.keys: npt.NDArray[Any] = keys
        self.n_docs: int = len(keys)
        self.postings = postings
        self._vocab = vocab
        self._indptr = postings.indptr

    def doc_freq(self, term: str) -> int:
        """Return how many of this part's documents contain ``term``."""
        term_id = self._vocab.get(term)
        if term_id is None:
            return 0
        return int(self._indptr[term_id + 1] - self._indptr[term_id])

    def top_k(
        self,
        weights: dict[str, float],
        k: int,
        among: frozenset[K] | None = None,
        scope: Scope | None = None,
    ) -> list[tuple[K, float]]:
        """Return up to ``k`` (key, score) pairs scoring above 0, best first.

        ``weights`` maps each query term to a multiplier of its BM25 score (its count in the
        query times any IDF correction); ``among``, if given, restricts the keys and ``scope``
        the documents.
        """
        if not weights or self.n_docs == 0:
            return []
        total = self.scores(weights)
        if among is not None:
            total[~np.isin(self.keys, np.asarray(list(among)))] = 0.0
        if scope is not None:
            scope.apply(total)
        return [(self.keys[i].item(), float(total[i])) for i in bm25.best_rows(total, k)]

    def scores(self, weights: dict[str, float]) -> npt.NDArray[np.float64]:
        """Every document's BM25 score for these weighted terms (see `top_k`)."""
        if not weights:
            return np.zeros(self.n_docs, dtype=np.float64)
        # One summation per distinct weight: a lone index has all weights equal to the query
        # term counts, so this is usually a single one.
        by_weight: dict[float, list[int]] = {}
        for term, weight in weights.items():
            by_weight.setdefault(weight, []).append(self._vocab[term])
        total = np.zeros(self.n_docs, dtype=np.float64)
        for weight, term_ids in by_weight.items():
            total += weight * bm25.score(self.postings, term_ids)
        return total


@dataclass(frozen=True)
class Scope:
    """Which documents of a part a search may return: not the ``dead`` positions, and only
    those ``allowed`` (None: every one)."""

    dead: Ints | None = None
    allowed: Mask | None = None

    def apply(self, total: npt.NDArray[np.float64]) -> None:
        if self.allowed is not None:
            total[~self.allowed] = 0.0
        if self.dead is not None:
            total[self.dead] = 0.0


def search_parts(
    parts: Sequence[tuple[_Part[K], Scope | None]],
    terms: list[str],
    k: int,
    among: frozenset[K] | None = None,
) -> dict[K, float]:
    """Score ``terms`` over disjoint parts as one corpus; return the normalised top ``k``.

    Each part's BM25 uses its own IDF and average length, so every term's score is re-weighted
    by IDF(all parts) / IDF(this part), which makes the parts' scores comparable. With one part
    the weight is exactly 1.0, i.e. plain BM25 scores. A key found in several parts keeps its
    best score.
    """
    if k <= 0 or not terms:
        return {}
    found: dict[K, float] = {}
    for (part, scope), weights in zip(parts, part_weights(parts, terms), strict=True):
        for key, score in part.top_k(weights, k, among, scope):
            found[key] = max(score, found.get(key, 0.0))
    return _normalise_top_k(found, k)


def part_weights(
    parts: Sequence[tuple[_Part[K], Scope | None]], terms: list[str]
) -> list[dict[str, float]]:
    """Each part's query term weights: count x IDF(all parts) / IDF(this part)."""
    query_tf = Counter(terms)
    n_all = sum(part.n_docs for part, _ in parts)
    df_all = {term: sum(part.doc_freq(term) for part, _ in parts) for term in query_tf}
    return [
        {
            term: count * bm25.idf(df_all[term], n_all) / bm25.idf(part.doc_freq(term), part.n_docs)
            for term, count in query_tf.items()
            if part.doc_freq(term) > 0
        }
        for part, _ in parts
    ]


def _normalise_top_k(found: dict[K, float], k: int) -> dict[K, float]:
    if not found:
        return {}
    best = max(found.values())
    # A stable sort keeps ties in part and document order, as `_Part.top_k` does.
    ranked = sorted(found.items(), key=lambda item: -item[1])[:k]
    return {key: score / best for key, score in ranked}


class LexicalIndex:
    """BM25 over one namespace's documents, immutable once built (or loaded)."""

    def __init__(
        self,
        columns: Columns,
        memories: bm25.Postings,
        sessions: bm25.Postings,
        *,
        k1: float,
        b: float,
    ) -> None:
        """Use `build`, `from_columns` or ``store.lexical.files``: this takes the matrices."""
        self.columns = columns
        self.k1 = k1
        self.b = b
        self.vocab: dict[str, int] = {t: i for i, t in enumerate(columns.tokens.names)}
        self.memory_part: _Part[int] = _Part(np.asarray(columns.keys), memories, self.vocab)
        session_keys = np.array(columns.session.names, dtype=str)
        self.session_part: _Part[str] = _Part(session_keys, sessions, self.vocab)
        self.max_memory_id: int | None = int(columns.keys[-1]) if len(columns) else None

    @cached_property
    def avg_len(self) -> float:
        """The documents' mean length in tokens (their BM25's)."""
        return float(self.columns.tokens.lengths.sum()) / max(len(self), 1)

    @cached_property
    def before(self) -> Ints:
        """Each document's predecessor in its session (``store.lexical.chain``), made on the
        first search that asks for context."""
        columns = self.columns
        return predecessors(columns.session.codes, columns.event_us, columns.keys)

    @classmethod
    def build(
        cls, docs: Iterable[LexDoc], *, k1: float = DEFAULT_K1, b: float = DEFAULT_B
    ) -> LexicalIndex:
        """Index ``docs``, read as a stream. Raise ValueError if two share a memory_id."""
        return cls.from_columns(Columns.from_docs(_tokenise_stream(docs)), k1=k1, b=b)

    @classmethod
    def from_tokenised(
        cls, docs: Iterable[TokDoc], *, k1: float = DEFAULT_K1, b: float = DEFAULT_B
    ) -> LexicalIndex:
        """Index documents already tokenised. Raise ValueError if two share a memory_id."""
        return cls.from_columns(Columns.from_docs(docs), k1=k1, b=b)

    @classmethod
    def from_columns(
        cls, columns: Columns, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B
    ) -> LexicalIndex:
        """Build both BM25 matrices over these columns."""
        tokens, n_terms = columns.tokens, len(columns.tokens.names)
        memories = bm25.build(tokens.codes, tokens.lengths, n_terms=n_terms, k1=k1, b=b)
        # One document per session: its memories' terms together, in memory order.
        of_token = np.repeat(columns.session.codes, tokens.lengths)
        in_session = of_token >= 0
        order = np.argsort(of_token[in_session], kind="stable")
        counts = np.bincount(of_token[in_session], minlength=len(columns.session.names))
        session_terms = np.asarray(tokens.codes)[in_session][order]
        sessions = bm25.build(session_terms, counts.astype(np.int64), n_terms=n_terms, k1=k1, b=b)
        return cls(columns, memories, sessions, k1=k1, b=b)

    @cached_property
    def facets(self) -> FacetIndex:
        """The documents' filter facets, inverted (made on the first filtered search)."""
        return FacetIndex(self.columns)

    def position(self, memory_ids: Ints) -> Ints:
        """Return the positions of these memory ids (all of which must be indexed)."""
        out: Ints = np.searchsorted(self.columns.keys, memory_ids).astype(np.int64)
        return out

    def search(self, query: str, k: int) -> dict[int, float]:
        """Return up to ``k`` memory_id -> score / best score, best first; {} if nothing matches."""
        return search_parts([(self.memory_part, None)], tokenize([query])[0], k)

    def search_sessions(self, query: str, k: int) -> dict[str, float]:
        """Return up to ``k`` session_key -> normalised session-document score, best first."""
        return search_parts([(self.session_part, None)], tokenize([query])[0], k)

    def __len__(self) -> int:
        return self.memory_part.n_docs
