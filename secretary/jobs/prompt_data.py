"""What the prompts show of memories and times: data placed inside a prompt's data blocks."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from store.views import MemoryView


def prompt_time(moment: datetime) -> str:
    """A time as the prompts show it: UTC, to the minute ("2026-03-01 12:00")."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def prompt_day(moment: datetime) -> str:
    """A day as the prompts show it: UTC ("2026-03-01")."""
    return prompt_time(moment)[:10]


def oldest_first(
    memories: Iterable[MemoryView], *, with_type: bool = True, days: bool = False
) -> list[dict[str, Any]]:
    """The memories as data for a prompt (only ever placed inside a data block), oldest first.

    Each has only what the prompts judge by: its id, type (unless ``with_type`` is false), time
    (or day, if ``days``) and content; when it was recorded and its importance are left out, no
    prompt uses them. A time is left out when it is the same as the memory before's, as the
    prompts say: memories from one conversation share it, and it costs a dozen tokens.
    """
    key, show = ("day", prompt_day) if days else ("time", prompt_time)
    shown: list[dict[str, Any]] = []
    before = None
    for memory in sorted(memories, key=lambda m: (m.event_time, m.id)):
        data: dict[str, Any] = {"id": memory.id}
        if with_type:
            data["type"] = memory.type
        when = show(memory.event_time)
        if when != before:
            data[key] = when
        data["content"] = memory.content
        shown.append(data)
        before = when
    return shown


def listed_once(groups: Iterable[Iterable[MemoryView]]) -> list[MemoryView]:
    """The memories of ``groups``, each once, in the order they first appear."""
    seen: dict[int, MemoryView] = {}
    for group in groups:
        for memory in group:
            seen.setdefault(memory.id, memory)
    return list(seen.values())
