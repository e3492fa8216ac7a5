"""The store's vocabularies: memory statuses and types, relation types, record statuses.

Plain enums with no database import, so that every layer (jobs, prompts, front ends) can name
them without loading SQLAlchemy.
"""

from __future__ import annotations

import enum


class MemoryStatus(enum.StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    MERGED = "merged"
    ARCHIVED = "archived"
    DELETED = "deleted"  # by a person or an agent (DELETE /v1/memories/{id}); undoable


# Statuses of a retired memory; retention purges them after the undo window.
TOMBSTONES = (
    MemoryStatus.SUPERSEDED,
    MemoryStatus.MERGED,
    MemoryStatus.ARCHIVED,
    MemoryStatus.DELETED,
)


class MemoryType(enum.StrEnum):
    """Known types; the column accepts any short identifier so the set is extensible."""

    EVENT = "event"
    FACT = "fact"
    PREFERENCE = "preference"
    INTERACTION_SUMMARY = "interaction_summary"
    TOOL_EXPERIENCE = "tool_experience"


class RelationType(enum.StrEnum):
    ASSOCIATIVE = "associative"
    CAUSAL = "causal"
    THEMATIC = "thematic"
    TEMPORAL = "temporal"
    CONTRADICTS = "contradicts"
    DERIVED_FROM = "derived_from"


# Relations that say the same read either way ("a contradicts b" is "b contradicts a"); a
# causal or derived_from relation has a direction. Activation spreads both ways over all.
UNDIRECTED = frozenset(
    {
        RelationType.ASSOCIATIVE.value,
        RelationType.THEMATIC.value,
        RelationType.TEMPORAL.value,
        RelationType.CONTRADICTS.value,
    }
)


class RecordStatus(enum.StrEnum):
    """A maintenance record's status as stored."""

    PLANNED = "planned"
    APPLIED = "applied"
    FAILED = "failed"
    REFUSED = "refused"
    UNDONE = "undone"


class Outcome(enum.StrEnum):
    """How a run (or write) ended, as the writer is told it; each maps to a stored status.

    ``nothing``: the run changed nothing but its record is worth keeping (it spent tokens, or
    spared protected memories); it is stored as "applied" with no operations.
    """

    APPLIED = "applied"
    PLANNED = "planned"
    REFUSED = "refused"
    FAILED = "failed"
    NOTHING = "nothing"

    @property
    def status(self) -> RecordStatus:
        return RecordStatus.APPLIED if self is Outcome.NOTHING else RecordStatus(self.value)
