"""BM25 lexical index over one namespace's memories, and a per-namespace cache of it.

The index is derived: SQL is the truth and the caller loads the documents. Scoring is bm25s
(Lucene BM25) over Snowball-stemmed English tokens; this module only tokenises, merges and
normalises. Scores are divided by the query's best score, so the best hit is exactly 1.0.

bm25s cannot add documents to a built index, so `LexicalCache` keeps a large *base* index and
a small *tail* index over the memories added since, rebuilding the tail (cheap) on each write
and the base only when the tail outgrows ``max_tail``.

A build reads its documents as a stream and tokenises them a chunk at a time into one flat
array of term ids (`_Corpus`) over a vocabulary that both parts share. A server builds the
index while it answers requests; a build that held every document's text and token list at
once left Python's heap fragmented by the requests' objects and resident for good: serving
100k memories took ~40 MB more (measured with the latency benchmark's server).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import threading
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import islice, pairwise
from typing import Any, Generic, TypeVar, cast

import bm25s
import numpy as np
import numpy.typing as npt
import Stemmer
from bm25s.tokenization import Tokenized

__all__ = ["LexDoc", "LexicalCache", "LexicalIndex", "LexicalView", "tokenize"]

# bm25s sets its own logger to DEBUG at import, which lets its per-build debug lines through
# any root handler; only its warnings are of interest to us.
logging.getLogger("bm25s").setLevel(logging.WARNING)

# bm25s's default pattern (words of 2+ characters) plus single digits: "3 kids", "2 pm".
_TOKEN_PATTERN = r"(?u)\b\w\w+\b|\b\d\b"
# bm25s's NLTK-derived English list (179 words), not its 33-word Lucene list ("en"): on LoCoMo
# turns it lifts evidence recall@10 from 0.58 to 0.63, as chat questions are mostly pronouns
# and auxiliaries ("what did I tell you about my ...").
_STOPWORDS = "en_plus"
_DEFAULT_K1 = 1.5
_DEFAULT_B = 0.75
_BUILD_CHUNK = 2000  # documents tokenised at a time by a build

# PyStemmer objects keep internal state and must not be shared between threads.
_local = threading.local()

K = TypeVar("K", int, str)


@dataclass(frozen=True, kw_only=True)
class LexDoc:
    """One memory to index: ``text`` is indexed as given (the caller prefixes the date)."""

    memory_id: int
    text: str
    session_key: str | None  # conversation session id; None = no session


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


def release_free_memory() -> None:
    """Return the C heap's free pages to the OS (glibc's malloc_trim); elsewhere do nothing."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)  # glibc only: musl and macOS lack it


_malloc_trim = _find_malloc_trim()


def _idf(df: int, n_docs: int) -> float:
    # The Lucene IDF that bm25s's "lucene" method uses; needed to re-weight merged parts.
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


class _Part(Generic[K]):
    """One bm25s index over keyed documents (memories or whole sessions)."""

    def __init__(
        self, keys: npt.NDArray[Any], terms: _Terms, vocab: dict[str, int], k1: float, b: float
    ) -> None:
        """Index document ``i`` = ``terms[i]`` under ``keys[i]``; ``vocab`` maps term -> id."""
        self.keys: npt.NDArray[Any] = keys
        self.n_docs: int = len(keys)
        self._bm25: bm25s.BM25 | None = None
        self._vocab: dict[str, int] = {}
        self._df: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        if terms.n_terms:  # bm25s fails on a corpus without a single token
            self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
            corpus = Tokenized(ids=terms, vocab=vocab)
            self._bm25.index(corpus, create_empty_token=False, show_progress=False)
            self._vocab = vocab
            # Column pointers of bm25s's CSC score matrix: their differences are the DFs
            # (0 for a term of the shared vocabulary that none of this part's documents has).
            self._df = np.diff(self._bm25.scores["indptr"]).astype(np.int64)

    def doc_freq(self, term: str) -> int:
        """Return how many of this part's documents contain ``term``."""
        term_id = self._vocab.get(term)
        return 0 if term_id is None else int(self._df[term_id])

    def top_k(
        self, weights: dict[str, float], k: int, among: frozenset[K] | None = None
    ) -> list[tuple[K, float]]:
        """Return up to ``k`` (key, score) pairs scoring above 0, best first.

        ``weights`` maps each query term to a multiplier of its bm25s score (its count in
        the query times any IDF correction); ``among``, if given, restricts the keys.
        """
        if self._bm25 is None or not weights:
            return []
        total = self._scores(self._bm25, weights)
        if among is not None:
            total[~np.isin(self.keys, np.asarray(list(among)))] = 0.0
        hits = np.flatnonzero(total)  # in document order
        if hits.size > k:
            # Partition the hits only: numpy's partition is very slow on the many zeros.
            scores = total[hits]
            threshold = np.partition(scores, hits.size - k)[hits.size - k]
            above = hits[scores > threshold]
            tied = hits[scores == threshold][: k - above.size]  # the first ones, for stability
            hits = np.concatenate((above, tied))
        # Best first, ties in document order, so equal scores come out the same every time.
        hits = hits[np.lexsort((hits, -total[hits]))]
        return [(self.keys[i].item(), float(total[i])) for i in hits]

    def _scores(self, bm25: bm25s.BM25, weights: dict[str, float]) -> npt.NDArray[np.float64]:
        # One bm25s call per distinct weight: a lone index has all weights equal to the
        # query term counts, so this is usually a single call.
        by_weight: dict[float, list[int]] = {}
        for term, weight in weights.items():
            by_weight.setdefault(weight, []).append(self._vocab[term])
        total = np.zeros(self.n_docs, dtype=np.float64)
        for weight, term_ids in by_weight.items():
            total += weight * bm25.get_scores_from_ids(term_ids)
        return total


def _search_parts(
    parts: Sequence[_Part[K]], terms: list[str], k: int, among: frozenset[K] | None = None
) -> dict[K, float]:
    """Score ``terms`` over disjoint parts as one corpus; return the normalised top ``k``.

    Each part's BM25 uses its own IDF and average length, so every term's score is re-weighted
    by IDF(all parts) / IDF(this part), which makes the parts' scores comparable. With one part
    the weight is exactly 1.0, i.e. plain bm25s scores. A key found in several parts keeps its
    best score.
    """
    if k <= 0 or not terms:
        return {}
    query_tf = Counter(terms)
    n_all = sum(part.n_docs for part in parts)
    df_all = {term: sum(part.doc_freq(term) for part in parts) for term in query_tf}
    found: dict[K, float] = {}
    for part in parts:
        weights = {
            term: count * _idf(df_all[term], n_all) / _idf(part.doc_freq(term), part.n_docs)
            for term, count in query_tf.items()
            if part.doc_freq(term) > 0
        }
        for key, score in part.top_k(weights, k, among):
            found[key] = max(score, found.get(key, 0.0))
    return _normalise_top_k(found, k)


def _normalise_top_k(found: dict[K, float], k: int) -> dict[K, float]:
    if not found:
        return {}
    best = max(found.values())
    # A stable sort keeps ties in part and document order, as `_Part.top_k` does.
    ranked = sorted(found.items(), key=lambda item: -item[1])[:k]
    return {key: score / best for key, score in ranked}


class _Terms:
    """Documents as slices of one flat term-id array; each document's list is made on demand.

    What bm25s iterates over when it builds: one small list alive at a time, where a list of
    lists would hold a Python int per token.
    """

    def __init__(self, term_ids: npt.NDArray[np.int32], lengths: npt.NDArray[np.int64]) -> None:
        self._term_ids = term_ids
        self._bounds = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        self.n_terms = int(self._bounds[-1])

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def __iter__(self) -> Iterator[list[int]]:
        term_ids = self._term_ids
        for first in range(0, len(self), 4096):  # bounds as Python ints, a block at a time
            bounds = self._bounds[first : first + 4097].tolist()
            for start, end in pairwise(bounds):
                yield cast(list[int], term_ids[start:end].tolist())


@dataclass(frozen=True, slots=True)
class _TokDoc:
    """A document already tokenised, kept so the tail can be rebuilt without re-tokenising."""

    memory_id: int
    session_key: str | None
    tokens: list[str]


def _tokenise_docs(docs: Sequence[LexDoc]) -> list[_TokDoc]:
    tokens = tokenize([doc.text for doc in docs])
    return [_TokDoc(d.memory_id, d.session_key, t) for d, t in zip(docs, tokens, strict=True)]


def _tokenise_stream(docs: Iterable[LexDoc]) -> Iterator[_TokDoc]:
    stream = iter(docs)
    while chunk := list(islice(stream, _BUILD_CHUNK)):
        yield from _tokenise_docs(chunk)


class _Corpus:
    """Tokenised documents gathered for one index: term ids over one shared vocabulary."""

    def __init__(self, docs: Iterable[_TokDoc]) -> None:
        self.vocab: dict[str, int] = {}
        self.sessions: dict[str, int] = {}  # session key -> number, in order of first use
        term_ids, lengths, memory_ids = array("i"), array("q"), array("q")
        session_of = array("q")  # each document's session number; -1 = no session
        vocab, sessions = self.vocab, self.sessions
        for doc in docs:
            term_ids.extend([vocab.setdefault(token, len(vocab)) for token in doc.tokens])
            lengths.append(len(doc.tokens))
            memory_ids.append(doc.memory_id)
            key = doc.session_key
            session_of.append(-1 if key is None else sessions.setdefault(key, len(sessions)))
        self.term_ids = np.array(term_ids, dtype=np.int32)
        self.lengths = np.array(lengths, dtype=np.int64)
        self.memory_ids = np.array(memory_ids, dtype=np.int64)
        self.session_of = np.array(session_of, dtype=np.int64)

    def memory_terms(self) -> _Terms:
        return _Terms(self.term_ids, self.lengths)

    def session_terms(self) -> _Terms:
        """One document per session: its memories' terms together, sessions in key order."""
        of_token = np.repeat(self.session_of, self.lengths)
        in_session = of_token >= 0
        order = np.argsort(of_token[in_session], kind="stable")
        counts = np.bincount(of_token[in_session], minlength=len(self.sessions))
        return _Terms(self.term_ids[in_session][order], counts.astype(np.int64))


class LexicalIndex:
    """BM25 over one namespace's documents, immutable once built."""

    def __init__(self, docs: Iterable[_TokDoc], *, k1: float, b: float) -> None:
        """Use `build`; this takes documents already tokenised."""
        corpus = _Corpus(docs)
        ids = corpus.memory_ids
        if np.unique(ids).size != ids.size:
            raise ValueError("LexicalIndex: duplicate memory_id in documents")
        self.max_memory_id: int | None = int(ids.max()) if ids.size else None
        self.memory_part: _Part[int] = _Part(ids, corpus.memory_terms(), corpus.vocab, k1, b)
        session_keys = np.array(list(corpus.sessions), dtype=str)
        self.session_part: _Part[str] = _Part(
            session_keys, corpus.session_terms(), corpus.vocab, k1, b
        )

    @classmethod
    def build(
        cls, docs: Iterable[LexDoc], *, k1: float = _DEFAULT_K1, b: float = _DEFAULT_B
    ) -> LexicalIndex:
        """Index ``docs``, read as a stream. Raise ValueError if two share a memory_id."""
        return cls(_tokenise_stream(docs), k1=k1, b=b)

    def search(self, query: str, k: int) -> dict[int, float]:
        """Return up to ``k`` memory_id -> score / best score, best first; {} if nothing matches."""
        return _search_parts([self.memory_part], tokenize([query])[0], k)

    def search_sessions(self, query: str, k: int) -> dict[str, float]:
        """Return up to ``k`` session_key -> normalised session-document score, best first."""
        return _search_parts([self.session_part], tokenize([query])[0], k)

    def __len__(self) -> int:
        return self.memory_part.n_docs


class LexicalView:
    """A base index plus an optional tail of newer memories, searched as one corpus.

    The tail must not repeat the base's memory_ids (`LexicalCache` ensures it).
    Approximations, all gone once the base is rebuilt: each part keeps its own average
    document length (the IDF is corrected to the union's); a session with memories in both
    parts is scored as two session documents and keeps the better score, and counts twice
    in the session IDF; memories removed since the base was built still score (the caller
    filters inactive ids).
    """

    def __init__(self, base: LexicalIndex, tail: LexicalIndex | None = None) -> None:
        self._indexes = [base] if tail is None or len(tail) == 0 else [base, tail]
        self.tail_size = 0 if tail is None else len(tail)

    def search(self, query: str, k: int, among: frozenset[int] | None = None) -> dict[int, float]:
        """Like `LexicalIndex.search`, over base and tail; ``among`` restricts the memories."""
        parts = [index.memory_part for index in self._indexes]
        return _search_parts(parts, tokenize([query])[0], k, among)

    def search_sessions(self, query: str, k: int) -> dict[str, float]:
        """Like `LexicalIndex.search_sessions`, over base and tail."""
        parts = [index.session_part for index in self._indexes]
        return _search_parts(parts, tokenize([query])[0], k)

    def __len__(self) -> int:
        return sum(len(index) for index in self._indexes)


@dataclass(frozen=True)
class _State:
    """What the cache holds for one namespace at one revision."""

    revision: int
    base: LexicalIndex
    tail: tuple[_TokDoc, ...]
    watermark: int  # highest memory_id in base or tail; -1 when both are empty
    view: LexicalView


class _Slot:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # one loader/builder per namespace at a time
        self.state: _State | None = None


class LexicalCache:
    """Thread-safe cache of one LexicalIndex per namespace, keyed by the namespace's revision.

    A changed revision costs one ``load_since`` and, if memories were added, a rebuild of the
    small tail only. The base is rebuilt, synchronously inside `get` (searches of that
    namespace wait for it), on first use, after `invalidate`, and when the tail would pass
    ``max_tail`` documents. Removals and edits add no new ids, so they leave the index
    stale: the caller filters inactive ids; call `invalidate` after an in-place text edit.
    The tail is found by id (> highest id seen), so ids must grow in commit order (SQLite's
    single writer guarantees it); a memory committed with a lower id shows up only after the
    next base rebuild.
    """

    def __init__(
        self,
        *,
        max_tail: int = 2000,
        max_namespaces: int = 64,
        k1: float = _DEFAULT_K1,
        b: float = _DEFAULT_B,
    ) -> None:
        if max_tail < 0 or max_namespaces < 1:
            raise ValueError("LexicalCache: need max_tail >= 0 and max_namespaces >= 1")
        self._max_tail = max_tail
        self._max_namespaces = max_namespaces
        self._k1 = k1
        self._b = b
        self._lock = threading.Lock()  # guards _slots only; builds run under a slot's lock
        self._slots: OrderedDict[str, _Slot] = OrderedDict()

    def get(
        self,
        namespace: str,
        revision: int,
        load_all: Callable[[], Iterable[LexDoc]],
        load_since: Callable[[int], Sequence[LexDoc]],
    ) -> LexicalView:
        """Return a view of ``namespace`` as of ``revision``, loading only what changed.

        Read ``revision`` before (or in the same transaction as) the loaders' reads, so the
        loaded rows are at least that new. ``load_all()`` may stream its docs (a build reads
        them a chunk at a time); ``load_since(n)`` returns the docs with id > n.
        """
        slot = self._slot(namespace)
        state = slot.state  # states are immutable; reading the reference needs no lock
        if state is not None and state.revision == revision:
            return state.view
        with slot.lock:
            state = slot.state  # another thread may have refreshed it meanwhile
            if state is None or state.revision != revision:
                state = self._refresh(state, revision, load_all, load_since)
                slot.state = state
            return state.view

    @property
    def capacity(self) -> int:
        """How many namespaces the cache keeps (least recently used ones are dropped)."""
        return self._max_namespaces

    def invalidate(self, namespace: str) -> None:
        """Forget ``namespace`` so its next `get` rebuilds the base from ``load_all``."""
        with self._lock:
            self._slots.pop(namespace, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)

    def _slot(self, namespace: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(namespace)
            if slot is None:
                slot = self._slots[namespace] = _Slot()
                while len(self._slots) > self._max_namespaces:
                    self._slots.popitem(last=False)  # least recently used
            else:
                self._slots.move_to_end(namespace)
            return slot

    def _refresh(
        self,
        state: _State | None,
        revision: int,
        load_all: Callable[[], Iterable[LexDoc]],
        load_since: Callable[[int], Sequence[LexDoc]],
    ) -> _State:
        if state is None:
            return self._rebuild(revision, load_all)
        # Filter too: a loader returning older ids would otherwise duplicate base documents.
        fresh = [doc for doc in load_since(state.watermark) if doc.memory_id > state.watermark]
        if not fresh:
            return replace(state, revision=revision)  # removals or edits only: keep the index
        tail = state.tail + tuple(_tokenise_docs(fresh))
        if len(tail) > self._max_tail:
            return self._rebuild(revision, load_all)
        tail_index = LexicalIndex(tail, k1=self._k1, b=self._b)
        return _State(
            revision=revision,
            base=state.base,
            tail=tail,
            watermark=max(state.watermark, *(doc.memory_id for doc in fresh)),
            view=LexicalView(state.base, tail_index),
        )

    def _rebuild(self, revision: int, load_all: Callable[[], Iterable[LexDoc]]) -> _State:
        base = LexicalIndex.build(load_all(), k1=self._k1, b=self._b)
        # The build's garbage is freed now; give its pages back to the OS, which malloc
        # would otherwise keep.
        release_free_memory()
        watermark = -1 if base.max_memory_id is None else base.max_memory_id
        return _State(revision, base, (), watermark, LexicalView(base))
