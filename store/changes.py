"""Change kinds: what one recorded operation did, in the words an operator reads.

An operation is ``create|update|delete`` of a ``memory|relation|log`` (a conversation line, which
only an ingest's update and its undo change: ``logs_updated``); an update of a memory is named
by what it changed: its status (merged, superseded, archived, reactivated), its content
(updated), or only its place in the timeline (relinked, when a neighbour left or arrived). The
record list counts kinds from grouped columns of the operations (``store.reads.records``), the
record view and the diff from the images; both name them here. No database code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from store.kinds import MemoryStatus

# In the order they are listed.
KINDS = (
    "created",
    "updated",
    "merged",
    "superseded",
    "archived",
    "reactivated",
    "deleted",
    "relinked",
    "relations_created",
    "relations_updated",
    "relations_deleted",
    "logs_created",
    "logs_updated",
    "logs_deleted",
)
_PAST = {"create": "created", "update": "updated", "delete": "deleted"}
_RETIRED = {status.value for status in MemoryStatus} - {MemoryStatus.ACTIVE.value}


def change_kind(
    op: str,
    *,
    status_before: str | None = None,
    status_after: str | None = None,
    version_before: int | None = None,
    version_after: int | None = None,
) -> str:
    """Given an operation's name and the status and version in its images, return its kind."""
    action, _, target = op.partition("_")
    past = _PAST.get(action, action)
    if target in ("relation", "log"):
        return f"{target}s_{past}"
    if action != "update":
        return past
    if status_before != status_after:
        if status_after == MemoryStatus.ACTIVE.value:
            return "reactivated"
        return status_after if status_after in _RETIRED else "updated"
    # Every content change bumps the version (undo puts the old one back): a change of links or
    # recall statistics alone leaves it.
    return "updated" if version_before != version_after else "relinked"


def image_kind(op: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    """Return the kind of an operation given its before/after images."""
    return change_kind(
        op,
        status_before=(before or {}).get("status"),
        status_after=(after or {}).get("status"),
        version_before=(before or {}).get("version"),
        version_after=(after or {}).get("version"),
    )


def ordered(counts: Mapping[str, int]) -> dict[str, int]:
    """Return the non-zero counts in the order of KINDS (unknown kinds last, by name)."""
    known = [kind for kind in KINDS if counts.get(kind)]
    other = sorted(kind for kind in counts if kind not in KINDS and counts[kind])
    return {kind: counts[kind] for kind in (*known, *other)}


def describe(counts: Mapping[str, int]) -> str:
    """Return "2 created, 1 merged, 3 relations created", or "no changes"."""
    parts = [counted(kind, n) for kind, n in ordered(counts).items()]
    return ", ".join(parts) if parts else "no changes"


def label(kind: str) -> str:
    """Return a kind (or any snake_case name) in words: "relations_created" -> "relations
    created"."""
    return kind.replace("_", " ")


_NOUNS = {"relations": ("relation", "relations"), "logs": ("log line", "log lines")}


def counted(kind: str, count: int) -> str:
    """Return a count of a kind in words: "1 relation created", "2 merged"."""
    noun, _, verb = kind.partition("_")
    if noun in _NOUNS and verb:
        return f"{plural(count, *_NOUNS[noun])} {verb}"
    return f"{count} {label(kind)}"


def plural(count: int, one: str, many: str | None = None) -> str:
    """Return "1 memory", "2 memories": the count with the word it takes (default: one + "s")."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def count_kinds(kinds: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return ordered(counts)
