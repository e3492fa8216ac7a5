"""BM25 (Lucene variant) over term ids: a vectorised build and the query-time scoring.

The arrays are those bm25s keeps (a CSC matrix of precomputed per-term, per-document scores:
``data`` float32, ``indices`` int32 document numbers, ``indptr`` int64 per term), built with
numpy in whole-array steps instead of bm25s's loop over documents: a million memories take
seconds, not most of a minute, which is what lets the lexical index be compacted and saved
often. The scores are bit for bit those of ``bm25s.BM25(method="lucene")`` (a test compares
them): the same float64 operations in the same order, the logarithm from ``math.log``, the
result rounded to float32.

Pure: arrays in, arrays out. The arrays may be memory-mapped files (read-only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Postings", "best_rows", "build", "idf", "score", "term_frequencies"]

Ints = npt.NDArray[np.int64]
Int32s = npt.NDArray[np.int32]
Floats32 = npt.NDArray[np.float32]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Postings:
    """One BM25 index: per term ``t``, documents ``indices[indptr[t]:indptr[t+1]]`` (ascending)
    with their scores ``data[...]``."""

    data: Floats32
    indices: Int32s
    indptr: Ints
    n_docs: int

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    def doc_freqs(self) -> Ints:
        """Return each term's document frequency."""
        return np.diff(self.indptr)


def idf(df: int, n_docs: int) -> float:
    """The Lucene IDF bm25s uses (always > 0)."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def build(term_ids: Int32s, lengths: Ints, *, n_terms: int, k1: float, b: float) -> Postings:
    """Index documents given as one flat array of term ids and each document's length.

    Document ``i`` is ``term_ids[sum(lengths[:i]) : sum(lengths[:i + 1])]``; term ids must be
    below ``n_terms``. A term no document has gets an empty column.
    """
    n_docs = len(lengths)
    total = int(lengths.sum()) if n_docs else 0
    if total == 0:
        return Postings(
            data=np.zeros(0, np.float32),
            indices=np.zeros(0, np.int32),
            indptr=np.zeros(n_terms + 1, np.int64),
            n_docs=n_docs,
        )
    docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    # One key per (term, document) pair, term-major: sorted, they are the CSC order.
    keys, tf = np.unique(term_ids.astype(np.int64) * n_docs + docs, return_counts=True)
    del docs
    terms = keys // n_docs
    doc_of = (keys - terms * n_docs).astype(np.int32)
    del keys
    df = np.bincount(terms, minlength=n_terms).astype(np.int64)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    # bm25s: idf as float32, the rest in float64 from the document's length (exact in float64)
    # and the mean length, rounded to float32 at the end.
    idf32 = _idf_array(df, n_docs)
    avg_len = float(total) / n_docs
    norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / avg_len)
    tf64 = tf.astype(np.float32).astype(np.float64)
    tfc = tf64 / (norm[doc_of] + tf64)
    data = (idf32[terms].astype(np.float64) * tfc).astype(np.float32)
    return Postings(data=data, indices=doc_of, indptr=indptr, n_docs=n_docs)


def _idf_array(df: Ints, n_docs: int) -> Floats32:
    # math.log per distinct frequency (a few thousand at most): numpy's vectorised log may
    # differ from libm's in the last bit, and bm25s uses math.log.
    values, inverse = np.unique(df, return_inverse=True)
    table = np.array([idf(int(d), n_docs) if d else 0.0 for d in values], dtype=np.float32)
    out: Floats32 = table[inverse]
    return out


def score(postings: Postings, term_ids: list[int]) -> Floats32:
    """Return every document's summed score for these terms (float32, as bm25s adds them)."""
    scores = np.zeros(postings.n_docs, dtype=np.float32)
    indptr, indices, data = postings.indptr, postings.indices, postings.data
    for term in term_ids:
        start, end = int(indptr[term]), int(indptr[term + 1])
        # A term lists each document once, so a plain fancy-index add is np.add.at's result.
        scores[indices[start:end]] += data[start:end]
    return scores


def term_frequencies(
    postings: Postings,
    term: int,
    lengths: Ints,
    *,
    k1: float,
    b: float,
    avg_len: float | None = None,
) -> tuple[Int32s, Floats32]:
    """Return the documents holding ``term`` and how often it occurs in each.

    The postings keep scores, not counts; for one document a score is an increasing function
    of the count (``build``), so the count is read back from it, exactly, as counts are whole
    numbers. ``lengths`` are the documents' lengths the postings were built from (and their
    mean ``lengths.mean()``, which a caller asking often passes as ``avg_len``).
    """
    start, end = int(postings.indptr[term]), int(postings.indptr[term + 1])
    docs = postings.indices[start:end]
    if end == start:
        return docs, np.zeros(0, dtype=np.float32)
    if avg_len is None:
        avg_len = float(lengths.sum()) / postings.n_docs
    # In float32, as the scores are: a count below 10,000 still comes out whole.
    norm = lengths[docs].astype(np.float32)
    norm *= np.float32(k1 * b / avg_len)
    norm += np.float32(k1 * (1 - b))
    saturation = postings.data[start:end] / np.float32(idf(end - start, postings.n_docs))
    norm *= saturation  # tf / (tf + norm) = saturation, so tf = saturation x norm / (1 - it)
    saturation -= np.float32(1.0)
    norm /= -saturation
    counts: Floats32 = np.rint(norm)
    return docs, counts


def best_rows(total: Floats, k: int) -> Ints:
    """The positions of the ``k`` best scores above 0, best first, ties in position order (so
    equal scores come out the same every time)."""
    hits = _contenders(total, k)  # in document order
    if hits.size > k:
        # Partition the hits only: numpy's partition is very slow on the many zeros.
        scores = total[hits]
        threshold = np.partition(scores, hits.size - k)[hits.size - k]
        above = hits[scores > threshold]
        tied = hits[scores == threshold][: k - above.size]  # the first ones, for stability
        hits = np.concatenate((above, tied))
    out: Ints = hits[np.lexsort((hits, -total[hits]))]
    return out


# Above this many documents, `best_rows` guesses a bar from a sample of about SAMPLE scores
# before it partitions: at 1M documents, partitioning every score above 0 took ~9 ms a search.
SAMPLED_ABOVE = 1 << 16
SAMPLE = 1 << 14


def _contenders(total: Floats, k: int) -> Ints:
    """The positions, in order, of every score above 0, or in a long array only of those at
    or above a bar that at least ``k`` reach: those hold every score of the ``k`` best, ties
    with the ``k``th included. The bar is a score of an evenly spaced sample, chosen so that
    about 4 ``k`` are expected to reach it; if fewer than ``k`` do, every score above 0 is
    taken after all."""
    if total.size > SAMPLED_ABOVE and k > 0:
        step = total.size // SAMPLE
        sample = total[::step]
        sample = sample[sample > 0]  # (partitioning many equal zeros is slow)
        place = 4 * k // step + 1  # from the top of the sample
        if place <= sample.size:
            bar = np.partition(sample, sample.size - place)[sample.size - place]
            hits = np.flatnonzero(total >= bar)
            if hits.size >= k:
                return hits
    return np.flatnonzero(total)
