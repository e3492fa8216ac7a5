"""What a maintenance record says besides its operations, as values the writer is given.

No database code here: the jobs and front ends build these, ``store.write.unit`` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from store.kinds import Outcome, RecordStatus


@dataclass(frozen=True, kw_only=True)
class RecordInfo:
    """What the record of a run says besides its operations."""

    outcome: Outcome = Outcome.APPLIED
    model: str | None = None
    prompts: Sequence[Mapping[str, Any]] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # why a failed run failed
    # When the run ended (its start is the unit's ``now``); None: it ends at its start.
    finished_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """A pending (planned) record that a unit settles: it gets ``status`` and, in its stats,
    ``note`` plus ``applied_as``, the id of the settling unit's record."""

    record_id: int
    status: RecordStatus = RecordStatus.APPLIED
    note: Mapping[str, Any] = field(default_factory=dict)
    # The status the record must have now: a plan awaiting approval, or one the change cap
    # refused (which an operator may still approve).
    pending: tuple[RecordStatus, ...] = (RecordStatus.PLANNED,)
