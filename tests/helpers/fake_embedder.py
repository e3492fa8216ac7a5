"""A deterministic stand-in for store.vector.embedder.Embedder: bag of hashed words."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Hash each lower-cased word to a signed dimension; texts sharing words are similar."""

    def __init__(self, *, model_id: str = "fake:hashed-words:v1", dim: int = 384) -> None:
        self._model_id = model_id
        self._dim = dim
        self.calls: list[list[str]] = []  # every embed() batch, for call-count assertions

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 (len(texts), dim) L2-normalised vectors."""
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._vector(text)
        return out

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self._dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha256(word.encode("utf-8")).digest()
            index = int.from_bytes(digest[:4], "big") % self._dim
            vec[index] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0  # empty text still needs a unit vector
            return vec
        return vec / norm
