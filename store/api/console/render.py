"""Jinja filters for the console's templates: times, durations, money, score bars, counted
words, change kinds in words and texts a record no longer keeps (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment

from store.changes import counted, label, plural
from store.shapes.diff import NOT_KEPT


def when(moment: datetime | str | None) -> str:
    """A time as the pages show it: UTC, to the minute (an ISO 8601 string too, as stats keep
    them)."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def memory_text(text: str | None) -> str:
    """A memory's text in a run's diff; None when neither the record nor the store keeps it."""
    return NOT_KEPT if text is None else text


def money(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.4f}"


def bars(breakdown: Mapping[str, float]) -> list[tuple[str, float, int]]:
    """Given a hit's score breakdown, return (part, value, width in percent) to draw."""
    out = []
    for name, value in breakdown.items():
        if name == "score":
            continue
        width = max(0, min(100, round(abs(value) * 100)))
        out.append((name, value, width))
    return out


def request_badge(status: str) -> str:
    """The badge class of a dream request's status: done green, failed red, else waiting."""
    return {"done": "applied", "failed": "failed"}.get(status, "planned")


def json_text(value: Any) -> str:
    """A value as JSON text to show and edit: characters as they are (the template escapes
    them for HTML), where ``tojson`` writes ``<`` as ``\\u003c``."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def install_filters(env: Environment) -> None:
    env.filters["plural"] = plural
    env.filters["label"] = label
    env.filters["counted"] = counted
    env.filters["request_badge"] = request_badge
    env.filters["when"] = when
    env.filters["duration"] = duration
    env.filters["money"] = money
    env.filters["memory_text"] = memory_text
    env.filters["bars"] = bars
    env.filters["json_text"] = json_text
