"""Finding a job's candidates by meaning: new memories and their nearest neighbours."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from secretary.jobs.clustering import Pair, similar_pairs
from store.views import MemoryView

if TYPE_CHECKING:  # the store is handed in; jobs never open one
    from store.service import Store


def neighbours(
    store: Store, namespace: str, seeds: Sequence[MemoryView], *, per_seed: int, threshold: float
) -> list[Pair]:
    """Return pairs (seed, other memory) at least ``threshold`` similar, strongest first.

    Seeds are compared with each other directly (they may not be indexed yet) and with older
    memories through the vector index. Returned ids may include inactive memories when the
    index lags: callers keep only the ones SQL says are active.
    """
    if not seeds or per_seed <= 0:
        return []
    ids = [seed.id for seed in seeds]
    vectors = store.embedder.embed([seed.content for seed in seeds])
    best: dict[tuple[int, int], float] = {
        (a, b): s for a, b, s in similar_pairs(ids, vectors, threshold)
    }
    # One request for every seed; one more hit than wanted: the seed itself, if indexed, is
    # its own nearest hit.
    hits = store.index.query_many(namespace, list(vectors), per_seed + 1)
    for seed, found_hits in zip(seeds, hits, strict=True):
        found = 0
        for hit in found_hits:
            if hit.memory_id == seed.id or hit.similarity < threshold:
                continue
            pair = (min(seed.id, hit.memory_id), max(seed.id, hit.memory_id))
            best[pair] = max(best.get(pair, -1.0), hit.similarity)
            found += 1
            if found >= per_seed:
                break
    pairs = [(a, b, s) for (a, b), s in best.items()]
    return sorted(pairs, key=lambda pair: (-pair[2], pair[0], pair[1]))
