"""The vectors the index has yet to write, for the searches that come before it does.

A memory is in SQL (and so in BM25) the moment it is written; its vector reaches Chroma only
when the outbox is drained, a moment later. A search in between would count the memory's
cosine as the floor of the index's answer, so an agent that stores a memory and recalls it at
once (the MCP tools' threshold) would not get it back. While few changes wait, a search embeds
the waiting memories itself (each once: the embeddings are kept) and merges their cosines into
the index's answer, as the index will answer once it has them. More than ``PENDING_EMBEDDED``
waiting is a backlog: searches say so (``store.vector.health``) and this stands aside.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from math import inf

import numpy as np

from store.reads.memories import MemoryReads
from store.reads.search import SearchReads
from store.requests import SearchFilters
from store.search.query_shape import Vector
from store.vector.index import VectorHit

# Waiting memories a search embeds itself; beyond this the index is behind, not just lagging.
PENDING_EMBEDDED = 64
# Embeddings kept between searches (a memory's, at its version), newest used last to go.
KEPT_EMBEDDINGS = 1024

Embed = Callable[[list[str]], np.ndarray]


class PendingVectors:
    """Embeddings of the memories whose vectors wait in the outbox, per search."""

    def __init__(self, reads: SearchReads, memories: MemoryReads) -> None:
        self._reads = reads
        self._memories = memories
        self._kept: OrderedDict[tuple[str, int, int], Vector] = OrderedDict()
        self._namespaces: set[str] = set()  # those with embeddings kept: most have none
        self._lock = threading.Lock()

    def vectors(
        self,
        namespace: str,
        among: frozenset[int] | None,
        filters: SearchFilters | None,
        embed: Embed,
    ) -> dict[int, Vector]:
        """Return memory_id -> unit vector of the active memories of ``namespace`` (of
        ``among``, and passing ``filters``, if given: what the index itself would answer)
        whose vectors the index has yet to write; {} when none wait, or when more than
        PENDING_EMBEDDED do."""
        waiting = self._reads.pending_vectors(namespace, PENDING_EMBEDDED)
        self._drop_others(namespace, waiting or ())
        if not waiting:
            return {}
        if among is not None:
            waiting = [mid for mid in waiting if mid in among]
        views = self._memories.active(namespace, waiting)
        if filters is not None:
            views = {mid: view for mid, view in views.items() if filters.matches(view)}
        keys = {mid: (namespace, mid, view.version) for mid, view in views.items()}
        with self._lock:
            found = {mid: self._kept[key] for mid, key in keys.items() if key in self._kept}
            for key in (keys[mid] for mid in found):
                self._kept.move_to_end(key)
        missing = [mid for mid in keys if mid not in found]
        if missing:
            embedded = np.asarray(embed([views[mid].content for mid in missing]), np.float32)
            norms = np.linalg.norm(embedded, axis=1, keepdims=True)
            unit = embedded / np.where(norms > 0, norms, 1.0)
            with self._lock:
                for mid, vector in zip(missing, unit, strict=True):
                    found[mid] = self._kept[keys[mid]] = vector
                self._namespaces.add(namespace)
                while len(self._kept) > KEPT_EMBEDDINGS:
                    self._kept.popitem(last=False)
        return found

    def _drop_others(self, namespace: str, waiting: Sequence[int]) -> None:
        """Let go of the embeddings of the namespace's memories that no longer wait (indexed,
        or forgotten: an erased memory's vector must not outlive it here)."""
        still = set(waiting)
        with self._lock:
            if namespace not in self._namespaces:
                return
            gone = [k for k in self._kept if k[0] == namespace and k[1] not in still]
            for key in gone:
                del self._kept[key]
            if not any(k[0] == namespace for k in self._kept):
                self._namespaces.discard(namespace)


def cosines(query: Vector, vectors: Mapping[int, Vector]) -> dict[int, float]:
    """Return memory_id -> cosine of ``query`` with each (unit) vector."""
    norm = float(np.linalg.norm(query))
    if norm == 0 or not vectors:
        return {mid: 0.0 for mid in vectors}
    unit = np.asarray(query, np.float32).reshape(-1) / norm
    return {mid: min(1.0, max(-1.0, float(vector @ unit))) for mid, vector in vectors.items()}


def merged(hits: Sequence[VectorHit], fresh: Mapping[int, float], n: int) -> list[VectorHit]:
    """Return the index's ``hits`` (nearest first, ``n`` asked) with the cosines of memories
    it has yet to write (``fresh``), nearest first. A fresh cosine replaces the memory's
    indexed one (its old text); one below the last hit of a full answer is left out, as the
    index would leave it out, so what the answer says of the memories it omits still holds."""
    if not fresh:
        return list(hits)
    floor = hits[-1].similarity if len(hits) >= n and hits else -inf
    kept = [hit for hit in hits if hit.memory_id not in fresh]
    added = [
        VectorHit(memory_id=mid, similarity=value) for mid, value in fresh.items() if value >= floor
    ]
    return sorted([*kept, *added], key=lambda hit: -hit.similarity)
