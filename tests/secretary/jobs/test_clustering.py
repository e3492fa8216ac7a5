"""Pure candidate grouping: deterministic groups from ids, times and vectors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from secretary.jobs.clustering import (
    Fragment,
    capped_groups,
    cluster_fragments,
    groups_by_key,
    similar_pairs,
)

T = datetime(2026, 1, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)
A, B = [1.0, 0.0], [0.0, 1.0]
NEAR_A = [0.95, 0.3]


def test_similar_pairs_above_threshold_strongest_first() -> None:
    vectors = np.array([A, NEAR_A, B, A], dtype=np.float32)

    pairs = similar_pairs([1, 2, 3, 4], vectors, 0.9)

    assert [(a, b) for a, b, _ in pairs] == [(1, 4), (1, 2), (2, 4)]


def test_capped_groups_never_exceed_max_size() -> None:
    edges = [(1, 2, 0.99), (2, 3, 0.98), (3, 4, 0.97), (4, 5, 0.5), (7, 8, 0.9)]

    assert capped_groups(edges, max_size=3) == [(1, 2, 3), (4, 5), (7, 8)]


def test_groups_by_key_only_shared_keys() -> None:
    assert groups_by_key([(3, "h1"), (1, "h1"), (2, "h2"), (4, "h1")]) == [(1, 3, 4)]


def fragment(memory_id: int, minutes: int, vector: list[float]) -> Fragment:
    return Fragment(id=memory_id, event_time=T + minutes * MIN, embedding=vector)


def test_cluster_fragments_close_in_time_and_meaning() -> None:
    fragments = [
        fragment(1, 0, A),
        fragment(2, 10, B),
        fragment(3, 20, NEAR_A),
        fragment(4, 25, B),
        fragment(5, 500, A),  # same topic, but long after the window
    ]

    clusters = cluster_fragments(fragments, window=60 * MIN, threshold=0.8)

    assert clusters == [(1, 3), (2, 4)]


def test_cluster_fragments_is_deterministic_and_respects_max_size() -> None:
    fragments = [fragment(i, i, A) for i in range(1, 8)]

    once = cluster_fragments(fragments, window=60 * MIN, threshold=0.5, max_size=3)
    again = cluster_fragments(list(reversed(fragments)), window=60 * MIN, threshold=0.5, max_size=3)

    assert once == again == [(1, 2, 3), (4, 5, 6)]  # 7 alone is below min_size


def test_cluster_fragments_empty_input() -> None:
    assert cluster_fragments([], window=MIN, threshold=0.5) == []
