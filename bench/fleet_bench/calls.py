"""What the model server's call log says of a night: calls, rates, limits, tokens, repeats."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from fleet_bench.model import Call
from fleet_bench.window import busiest_window, peak_overlap, rate


def summary(calls: Sequence[Call], *, wall: float, rpm: int, counted_peak: int) -> dict[str, Any]:
    """The night's calls against its wall time and the configured requests-per-minute ``rpm``."""
    answered = [c for c in calls if c.status == 200]
    arrivals = busiest_window([c.at for c in calls])
    served = busiest_window([c.at for c in answered])
    return {
        "requests": len(calls),
        "answered": len(answered),
        "rate_limited_429": sum(c.status == 429 for c in calls),
        "errors": sum(c.status not in (200, 429) for c in calls),
        "repairs": sum(c.repair for c in answered),
        "calls_per_second": round(rate(len(answered), wall), 2),
        "peak_in_flight": counted_peak,
        "peak_in_flight_from_log": peak_overlap([(c.at, c.end) for c in answered]),
        "busiest_60s_all_requests": arrivals.count,
        "busiest_60s_answered": served.count,
        "rpm_limit": rpm,
        "rpm_exceeded": bool(rpm) and arrivals.count > rpm,
        "by_job": dict(sorted(Counter(c.job for c in answered).items())),
        "tokens": {
            "prompt": sum(c.prompt_tokens for c in answered),
            "completion": sum(c.completion_tokens for c in answered),
            "schema": sum(c.schema_tokens for c in answered),
        },
    }


def lines_sent_twice(calls: Sequence[Call]) -> dict[int, int]:
    """Log line id -> times the extractor sent it, for lines sent in more than one answered,
    first-attempt call (a repair re-sends its call's lines by design)."""
    seen = Counter(i for c in calls if c.status == 200 and not c.repair for i in c.log_ids)
    return {line: times for line, times in seen.items() if times > 1}


def namespaces_of(lines: Mapping[int, int], owner: Mapping[int, str]) -> Counter[str]:
    """How many of ``lines`` each namespace holds (``owner``: line id -> namespace)."""
    return Counter(owner.get(line, "?") for line in lines)
