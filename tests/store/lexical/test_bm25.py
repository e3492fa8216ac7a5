"""store.lexical.bm25 builds bit for bit the matrix bm25s builds, and scores as bm25s does."""

from __future__ import annotations

import numpy as np
import pytest
from bm25s import BM25
from bm25s.tokenization import Tokenized

from store.lexical import bm25


def _zipf_corpus(seed: int, docs: int, vocab: int) -> tuple[list[list[int]], np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, vocab + 1) ** 1.1
    weights /= weights.sum()
    lengths = rng.integers(0, 30, size=docs)  # some documents have no token at all
    corpus = [rng.choice(vocab, size=n, p=weights).tolist() for n in lengths]
    return corpus, lengths


@pytest.mark.parametrize(("seed", "k1", "b"), [(0, 1.5, 0.75), (1, 1.2, 0.3), (2, 0.9, 1.0)])
def test_build_equals_bm25s_bit_for_bit(seed: int, k1: float, b: float) -> None:
    corpus, lengths = _zipf_corpus(seed, docs=3000, vocab=4000)
    reference = BM25(k1=k1, b=b, method="lucene")
    vocab = {str(term): term for term in range(4000)}
    reference.index(
        Tokenized(ids=corpus, vocab=vocab), create_empty_token=False, show_progress=False
    )

    flat = np.array([term for doc in corpus for term in doc], dtype=np.int32)
    ours = bm25.build(flat, lengths.astype(np.int64), n_terms=4000, k1=k1, b=b)

    assert np.array_equal(ours.data, reference.scores["data"])
    assert np.array_equal(ours.indices, reference.scores["indices"])
    assert np.array_equal(ours.indptr, reference.scores["indptr"])
    for query in ([0], [1, 2, 3], [3999, 17, 0, 250], []):
        assert np.array_equal(bm25.score(ours, query), reference.get_scores_from_ids(query))


def test_build_no_tokens_gives_empty_columns() -> None:
    postings = bm25.build(np.zeros(0, np.int32), np.zeros(3, np.int64), n_terms=2, k1=1.5, b=0.75)
    assert postings.indptr.tolist() == [0, 0, 0]
    assert bm25.score(postings, [0, 1]).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("seed", "k1", "b"), [(3, 0.9, 0.4), (4, 1.5, 0.75), (5, 1.2, 1.0)])
def test_term_frequencies_reads_back_each_documents_count(seed: int, k1: float, b: float) -> None:
    corpus, lengths = _zipf_corpus(seed, docs=1500, vocab=300)
    corpus.append([7] * 250 + [8])  # a long document repeating one term: the hardest to read
    lengths = np.append(lengths, 251).astype(np.int64)
    flat = np.array([term for doc in corpus for term in doc], dtype=np.int32)
    postings = bm25.build(flat, lengths, n_terms=300, k1=k1, b=b)

    for term in (0, 1, 7, 8, 150, 299):
        docs, counts = bm25.term_frequencies(postings, term, lengths, k1=k1, b=b)
        expected = [corpus[doc].count(term) for doc in docs.tolist()]
        assert docs.tolist() == [i for i, doc in enumerate(corpus) if term in doc]
        assert counts.tolist() == expected


def _best_by_sorting(total: np.ndarray, k: int) -> list[int]:
    """The reference: every position above 0, best first, ties by position."""
    positive = [i for i in range(total.size) if total[i] > 0]
    return sorted(positive, key=lambda i: (-total[i], i))[:k]


@pytest.mark.parametrize(
    ("size", "k", "shape"),
    [
        (1_000, 10, "spread"),
        (200_000, 100, "spread"),  # long: the bar from a sample
        (200_000, 100, "ties"),  # few distinct scores: the bar lands on a tie
        (200_000, 100, "sparse"),  # fewer above 0 than the sample expects
        (200_000, 5_000, "spread"),  # a k of thousands
        (200_000, 50_000, "spread"),  # more than the sample can place: every score above 0
        (200_000, 100, "one"),
        (200_000, 100, "lucky"),  # the sample holds the best few: fewer than k reach the bar
    ],
)
def test_best_rows_equals_sorting_every_score(size: int, k: int, shape: str) -> None:
    rng = np.random.default_rng(size + k)
    if shape == "spread":
        total = rng.exponential(size=size) * (rng.random(size) < 0.6)
    elif shape == "ties":
        total = rng.integers(0, 4, size=size).astype(np.float64)
    elif shape == "sparse":
        total = np.zeros(size)
        total[rng.choice(size, 150, replace=False)] = rng.random(150) + 0.1
    elif shape == "lucky":
        total = np.zeros(size)
        total[rng.choice(size, 1_000, replace=False)] = 1.0
        total[:: size // bm25.SAMPLE][:60] = 2.0
    else:
        total = np.zeros(size)
        total[size // 2] = 1.0
    assert bm25.best_rows(total, k).tolist() == _best_by_sorting(total, k)
