"""Pure arithmetic over the model server's call log: sliding windows, peaks, rates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WindowPeak:
    """The most arrivals in any window of ``seconds``, and when that window started."""

    seconds: float
    count: int
    start: float | None


def busiest_window(times: Sequence[float], seconds: float = 60.0) -> WindowPeak:
    """Given arrival times (seconds, any order), return the most of them in any half-open
    window [t, t + seconds); the busiest window starts at an arrival, so only those are tried."""
    ordered = sorted(times)
    best, best_start, first = 0, None, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - seconds:
            first += 1
        if last - first + 1 > best:
            best, best_start = last - first + 1, ordered[first]
    return WindowPeak(seconds=seconds, count=best, start=best_start)


def peak_overlap(spans: Sequence[tuple[float, float]]) -> int:
    """Given (start, end) spans, return the most that are open at once (an end at the same
    instant as a start closes first)."""
    events = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    open_, best = 0, 0
    for _, step in events:
        open_ += step
        best = max(best, open_)
    return best


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
