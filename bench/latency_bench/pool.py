"""Vectors for large stores: real embeddings of generated texts, mixed per text by its hash."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import corpus
import numpy as np
from benchkit import say

from latency_bench.common import WORK
from store.vector.embedder import Embedder

POOL_SEED = 7


class PoolEmbedder:
    """Stands in for the model while filling large stores: text -> mix of two pool vectors.

    The vectors are real embeddings of generated texts; a text's hash picks two of them and a
    weight, so equal texts get equal vectors. It reports the real model's id, so the collection
    is the one the real embedder (used for every query) opens.
    """

    def __init__(self, pool: np.ndarray, model_id: str) -> None:
        self._pool = pool
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return int(self._pool.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(self._pool)
        picks = np.array([_picks(text, n) for text in texts], dtype=np.int64).reshape(-1, 3)
        weight = (0.3 + 0.4 * picks[:, 2] / 1000.0)[:, None].astype(np.float32)
        mixed = weight * self._pool[picks[:, 0]] + (1 - weight) * self._pool[picks[:, 1]]
        norms = np.linalg.norm(mixed, axis=1, keepdims=True)
        out: np.ndarray = (mixed / np.maximum(norms, 1e-12)).astype(np.float32)
        return out


def _picks(text: str, n: int) -> tuple[int, int, int]:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()
    a, b, c = (int.from_bytes(digest[i : i + 4], "little") for i in (0, 4, 8))
    return a % n, b % n, c % 1001


def vector_pool(size: int, embedder: Embedder) -> np.ndarray:
    """Return real embeddings of ``size`` generated texts, cached under the work dir."""
    path = WORK / f"pool-{size}-seed{POOL_SEED}.npy"
    if path.exists():
        pool: np.ndarray = np.load(path)
        if pool.shape == (size, embedder.dim):
            return pool
    texts = corpus.texts(size, seed=POOL_SEED)
    say(f"embedding a pool of {size} texts with the real model (cached afterwards)")
    parts, started = [], time.perf_counter()
    for start in range(0, size, 1000):
        parts.append(embedder.embed(texts[start : start + 1000]))
        done = start + len(parts[-1])
        say(f"  pool {done}/{size} ({done / (time.perf_counter() - started):.0f} texts/s)")
    pool = np.vstack(parts).astype(np.float32)
    WORK.mkdir(parents=True, exist_ok=True)
    np.save(path, pool)
    return pool
