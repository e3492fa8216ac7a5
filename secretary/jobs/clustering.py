"""Candidate grouping as pure functions over (id, time, vector) values; no I/O, deterministic.

Ties are always broken by id so that the same input gives the same groups, run after run.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Pair = tuple[int, int, float]  # (smaller id, larger id, cosine similarity)


def normalise(vectors: Sequence[Sequence[float]] | Sequence[Vectors] | Vectors) -> Vectors:
    """Return the rows scaled to unit length (a zero row stays zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        matrix = matrix.reshape(len(matrix), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Vectors = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def similar_pairs(ids: Sequence[int], vectors: Vectors, threshold: float) -> list[Pair]:
    """Return every pair of distinct ids whose vectors are at least ``threshold`` similar."""
    if len(ids) < 2:
        return []
    unit = normalise(vectors)
    sims = unit @ unit.T
    out: list[Pair] = []
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            if ids[i] != ids[j] and float(sims[i, j]) >= threshold:
                a, b = sorted((ids[i], ids[j]))
                out.append((a, b, float(sims[i, j])))
    return sorted(set(out), key=_pair_order)


def _pair_order(edge: Pair) -> tuple[float, int, int]:
    return (-edge[2], edge[0], edge[1])


def capped_groups(edges: Iterable[Pair], *, max_size: int) -> list[tuple[int, ...]]:
    """Join ids along edges, strongest first, never letting a group grow past ``max_size``.

    A plain connected-components pass can chain a whole namespace into one group; taking the
    strongest edges first keeps the closest pairs together when a group is full.
    """
    parent: dict[int, int] = {}
    size: dict[int, int] = {}

    def root(node: int) -> int:
        parent.setdefault(node, node)
        size.setdefault(node, 1)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b, _ in sorted(edges, key=_pair_order):
        ra, rb = root(a), root(b)
        if ra != rb and size[ra] + size[rb] <= max_size:
            keep, gone = min(ra, rb), max(ra, rb)
            parent[gone] = keep
            size[keep] += size[gone]
    groups: dict[int, list[int]] = {}
    for node in parent:
        groups.setdefault(root(node), []).append(node)
    found = [tuple(sorted(members)) for members in groups.values() if len(members) > 1]
    return sorted(found)


def groups_by_key(items: Iterable[tuple[int, Hashable]]) -> list[tuple[int, ...]]:
    """Return the ids sharing a key (e.g. a content hash), groups of two or more, sorted."""
    by_key: dict[Hashable, list[int]] = {}
    for memory_id, key in items:
        by_key.setdefault(key, []).append(memory_id)
    return sorted(tuple(sorted(set(ids))) for ids in by_key.values() if len(set(ids)) > 1)


@dataclass(frozen=True, kw_only=True)
class Fragment:
    id: int
    event_time: datetime
    embedding: Sequence[float] | Vectors


@dataclass
class _Open:
    start: datetime
    members: list[int]
    total: Vectors  # sum of the members' unit vectors; its direction is the centroid's


def cluster_fragments(
    fragments: Sequence[Fragment],
    *,
    window: timedelta,
    threshold: float,
    min_size: int = 2,
    max_size: int = 12,
) -> list[tuple[int, ...]]:
    """Group fragments that are close in time and in meaning, in time order.

    A fragment joins the open cluster it is most similar to (cosine to the cluster's centroid
    at least ``threshold``) among those that started at most ``window`` before it and are not
    full; otherwise it starts a new cluster. Clusters of at least ``min_size`` are returned,
    each sorted by time, then id.
    """
    if not fragments:
        return []
    ordered = sorted(fragments, key=lambda f: (f.event_time, f.id))
    unit = normalise([np.asarray(f.embedding, dtype=np.float32).reshape(-1) for f in ordered])
    open_clusters: list[_Open] = []
    closed: list[_Open] = []
    for fragment, vector in zip(ordered, unit, strict=True):
        still_open: list[_Open] = []
        for cluster in open_clusters:
            fits_time = fragment.event_time - cluster.start <= window
            (still_open if fits_time and len(cluster.members) < max_size else closed).append(
                cluster
            )
        open_clusters = still_open
        best: _Open | None = None
        best_sim = threshold
        for cluster in open_clusters:
            norm = float(np.linalg.norm(cluster.total))
            sim = float(cluster.total @ vector) / norm if norm else 0.0
            if sim >= best_sim and (best is None or sim > best_sim):
                best, best_sim = cluster, sim
        if best is None:
            open_clusters.append(
                _Open(start=fragment.event_time, members=[fragment.id], total=vector.copy())
            )
        else:
            best.members.append(fragment.id)
            best.total = best.total + vector
    closed.extend(open_clusters)
    found = [tuple(c.members) for c in closed if len(c.members) >= min_size]
    order = {f.id: i for i, f in enumerate(ordered)}
    return sorted(found, key=lambda members: order[members[0]])
