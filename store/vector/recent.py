"""The embeddings of recent texts, kept so that a text is embedded once however often it is
asked for: a night's run embeds its new memories when the index takes them, then the linker
and the auditor look for their neighbours with the same texts.

Keys are SHA-256 digests, never texts: the cache holds no content a forget would have to find.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from store.vector.embedder import Embedder, FloatMatrix

RECENT_TEXTS = 4096  # about 6 MB of 384-dimensional vectors


class RecentEmbeddings:
    """An ``Embedder`` over another that remembers the vectors of its last ``size`` texts."""

    def __init__(self, embedder: Embedder, size: int = RECENT_TEXTS) -> None:
        self.inner = embedder
        self._size = size
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        keys = [hashlib.sha256(text.encode()).digest() for text in texts]
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        missing: dict[bytes, list[int]] = {}
        with self._lock:
            for row, key in enumerate(keys):
                vector = self._vectors.get(key)
                if vector is None:
                    missing.setdefault(key, []).append(row)
                else:
                    self._vectors.move_to_end(key)
                    out[row] = vector
            self.hits += len(keys) - sum(len(rows) for rows in missing.values())
            self.misses += sum(len(rows) for rows in missing.values())
        if missing:
            firsts = [rows[0] for rows in missing.values()]
            made = np.asarray(self.inner.embed([texts[row] for row in firsts]), dtype=np.float32)
            with self._lock:
                for (key, rows), vector in zip(missing.items(), made, strict=True):
                    out[rows] = vector
                    self._vectors[key] = vector.copy()
                    self._vectors.move_to_end(key)
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        return out
