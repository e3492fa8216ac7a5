"""Guardrails on a plan, as pure functions over values: protection, the change cap, reply ids.

The runner applies them between ``plan()`` and ``apply()``; nothing here reads or writes.
Which memories a plan changes is ``store.operations.changed_ids``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from secretary.jobs.settings import GuardrailSettings
from store.kinds import MemoryStatus
from store.operations import (
    CreateMemory,
    Operation,
    Purge,
    UpdateMemory,
    changed_ids,
    referenced_ids,
)


@dataclass(frozen=True, kw_only=True)
class ProtectionFacts:
    """What decides whether a memory is protected."""

    id: int
    pinned: bool
    importance: int
    last_accessed: datetime | None


@dataclass(frozen=True, kw_only=True)
class Filtered:
    """The changes that may go ahead, and the protected memories the others would have hit."""

    kept: tuple[int, ...]  # indexes of the kept changes
    dropped: tuple[int, ...]  # indexes of the dropped changes
    protected_hit: tuple[int, ...]  # protected memory ids the dropped changes touched


def protected_ids(
    facts: Iterable[ProtectionFacts], settings: GuardrailSettings, *, now: datetime
) -> set[int]:
    """Given memories, return the ids of those no job may retire or rewrite."""
    if settings.allow_protected_changes:
        return set()
    recent = now - timedelta(days=settings.protect_accessed_days)
    out: set[int] = set()
    for fact in facts:
        accessed = (
            settings.protect_accessed_days > 0
            and fact.last_accessed is not None
            and fact.last_accessed >= recent
        )
        if fact.pinned or fact.importance >= settings.protect_importance or accessed:
            out.add(fact.id)
    return out


def drop_protected(
    changes: Sequence[Sequence[Operation]],
    protected: Collection[int],
    *,
    lossless: Collection[int] = (),
    pinned: Collection[int] = (),
) -> Filtered:
    """Keep the changes that leave protected memories alone; a change stands or falls whole.

    Dropping one operation of a merge (say, the fragment's status) would leave the rest
    inconsistent, so the whole change goes. The changes at the indexes in ``lossless`` merge an
    exact duplicate into a memory with the same text: protection is there to keep a model from
    rewriting what a person relies on, not to keep a copy alive, so only a pinned memory
    (``pinned``, among the protected) holds one back.
    """
    kept: list[int] = []
    dropped: list[int] = []
    hit: set[int] = set()
    for index, operations in enumerate(changes):
        guarded = set(pinned) & set(protected) if index in lossless else set(protected)
        touched = changed_ids(operations) & guarded
        if touched:
            dropped.append(index)
            hit.update(touched)
        else:
            kept.append(index)
    return Filtered(kept=tuple(kept), dropped=tuple(dropped), protected_hit=tuple(sorted(hit)))


def named_ids(operations: Iterable[Operation]) -> set[int]:
    """The existing memories the operations name, and so expect to be active when applied.

    Purges aside: they remove tombstones, which are never active.
    """
    return referenced_ids(op for op in operations if not isinstance(op, Purge))


def overtaken(
    changes: Sequence[tuple[Sequence[Operation], Mapping[int, int]]],
    current: Mapping[int, tuple[str, int]],
) -> dict[int, str]:
    """Given changes, each with the versions of the memories it was decided on as the job read
    them, and the status and version of the memories they name now, return, by change index,
    why a change was overtaken (only such changes): it names a memory no longer active, or one
    whose content another writer changed since it was read."""
    out: dict[int, str] = {}
    for index, (operations, read) in enumerate(changes):
        named = sorted(named_ids(operations) | set(read))
        retired = [i for i in named if i in current and current[i][0] != MemoryStatus.ACTIVE]
        if retired:
            said = ", ".join(f"#{i} ({current[i][0]})" for i in retired)
            out[index] = f"names {said}, no longer active since the run read it"
            continue
        edited = [i for i in named if i in read and i in current and current[i][1] != read[i]]
        if edited:
            said = ", ".join(f"#{i}" for i in edited)
            out[index] = f"{said} changed since the run read it"
    return out


def too_long(changes: Sequence[Sequence[Operation]], max_chars: int) -> dict[int, str]:
    """Given changes and the longest content a memory may hold (``ingest.max_content_chars``),
    return, by change index, why a memory a change writes is longer (only such changes).

    What a person cannot ingest, a model may not write either (a reply looping on one phrase
    fills its whole token cap)."""
    out: dict[int, str] = {}
    for index, operations in enumerate(changes):
        for op in operations:
            text = op.content if isinstance(op, CreateMemory) else None
            if isinstance(op, UpdateMemory) and isinstance(op.changes.get("content"), str):
                text = op.changes["content"]
            if text is not None and len(text) > max_chars:
                out[index] = (
                    f"its content has {len(text)} characters, more than the limit of"
                    f" {max_chars} (ingest.max_content_chars)"
                )
                break
    return out


@dataclass(frozen=True, kw_only=True)
class ChangeCount:
    existing: int  # existing memories retired or rewritten
    purged: int  # tombstones removed for good


def count_changes(operations: Iterable[Operation]) -> ChangeCount:
    """Count what a plan does to memories that already exist (creations do not count).

    The runner leaves out the merges of exact duplicates (``Change.lossless``): the cap stops a
    plan that would retire much at once; such a merge loses no text and is undone like any
    change, and the auditor writes them in records of at most ``max_changes_per_run`` each.
    """
    ops = list(operations)
    purged = {op.memory_id for op in ops if isinstance(op, Purge)}
    return ChangeCount(existing=len(changed_ids(ops) - purged), purged=len(purged))


def cap_refusal(count: ChangeCount, active: int, settings: GuardrailSettings) -> str | None:
    """Return why a plan is over the per-run cap, or None if it may be applied.

    Purges count against the absolute cap only: they remove tombstones, which are no longer
    among the active memories the share is measured against.
    """
    total = count.existing + count.purged
    if settings.max_changes_per_run and total > settings.max_changes_per_run:
        return (
            f"the plan changes {total} memories, more than max_changes_per_run"
            f" ({settings.max_changes_per_run})"
        )
    share_limit = settings.max_change_share * active
    if count.existing > settings.change_share_floor and count.existing > share_limit:
        return (
            f"the plan changes {count.existing} of {active} active memories, more than"
            f" max_change_share ({settings.max_change_share:.0%})"
        )
    return None


def needs_approval(mode: str, operations: Sequence[Operation]) -> bool:
    """Tell whether the approval mode ([jobs] approval) holds these operations back."""
    if mode == "all":
        return bool(operations)
    if mode == "changes":
        count = count_changes(operations)
        return count.existing + count.purged > 0
    return False
