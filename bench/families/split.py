"""Deterministic halves of a family (tune / report) and deterministic subsamples (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

TUNE = "tune"
REPORT = "report"


def _key(family: str, unit: str) -> str:
    return hashlib.sha256(f"{family}/{unit}".encode()).hexdigest()


def halves(family: str, units: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """Split ``units`` (namespaces or question ids) in two by the hash of family/unit: the
    first half (the larger, if odd) may be tuned on, the second is only reported. The same
    units always give the same halves, whatever their order and whatever else changes."""
    ordered = sorted(set(units), key=lambda unit: _key(family, unit))
    cut = (len(ordered) + 1) // 2
    return frozenset(ordered[:cut]), frozenset(ordered[cut:])


def sample(family: str, qids: Iterable[str], n: int) -> frozenset[str]:
    """The ``n`` question ids of smallest hash: a subsample that only grows with ``n``."""
    return frozenset(sorted(set(qids), key=lambda qid: _key(f"{family}/sample", qid))[:n])
