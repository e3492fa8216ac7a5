"""Stored plans that an erasure overtook: their changes that name what a forget erased.

A job plans from what it read (and waits on the model) before it stores a plan for approval or
refused by the change cap; a forget may erase meanwhile what the plan names, and the plan would
carry it back (a summary written from forgotten fragments, a memory made of a forgotten line).
The namespace lock orders the two writes, so each side checks the other:

- a forget refuses the plans already stored (``drop_stale`` on each pending record);
- the writer checks a plan stored after it, in the same transaction (``drop_overtaken``): every
  memory a change names and every line its new memories cite must still be in the namespace.

Either way the changes naming something erased are dropped, with their labels and operations,
and the plan is refused by "forget": what is left is no longer what was planned, so it cannot be
approved as it stands (the next run plans afresh from what is left).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.db import chunks
from store.kinds import RecordStatus
from store.models import ConversationLog, Memory
from store.operations import CreateMemory, decode_operation, referenced_ids
from store.write.unit import UnitOfWork

# A stored plan is one of these until it is approved, applied or dropped.
PENDING = frozenset({RecordStatus.PLANNED.value, RecordStatus.REFUSED.value})


def names(change: Any) -> tuple[set[int], set[int]]:
    """Given a stored change ({"label", "operations"}), return the memory ids its operations
    name and the conversation line ids its new memories cite."""
    encoded = change.get("operations") if isinstance(change, Mapping) else None
    memories: set[int] = set()
    lines: set[int] = set()
    for data in encoded if isinstance(encoded, list) else ():
        try:
            op = decode_operation(data)
        except (TypeError, ValueError, KeyError):
            continue  # not an operation this store wrote: nothing it could name
        memories |= referenced_ids([op])
        cited = op.metadata.get("source_log_ids") if isinstance(op, CreateMemory) else None
        if isinstance(cited, list):
            lines.update(i for i in cited if isinstance(i, int))
    return memories, lines


def drop_stale(
    stats: Mapping[str, Any], *, memories: set[int], lines: set[int], why: str
) -> dict[str, Any] | None:
    """Given a stored plan's record stats and what was erased, return the stats without the
    changes that name any of it, refused by "forget" and saying ``why``; None if no change
    does."""
    plan = stats.get("plan")
    if not isinstance(plan, Mapping) or not isinstance(plan.get("changes"), list):
        return None
    changes = plan["changes"]
    kept = []
    for change in changes:
        named, cited = names(change)
        if not (named & memories or cited & lines):
            kept.append(change)
    if len(kept) == len(changes):
        return None
    targets = plan.get("targets")
    if isinstance(targets, Mapping):  # memory id (as text) -> version read when planned
        targets = {k: v for k, v in targets.items() if not k.isdigit() or int(k) not in memories}
    return {
        **stats,
        "plan": {**plan, "changes": kept, "targets": targets},
        "refused_by": "forget",
        "stale": f"{why}; {len(changes) - len(kept)} of its {len(changes)} changes dropped",
    }


def drop_overtaken(unit: UnitOfWork) -> None:
    """If the record the unit writes stores a plan, drop the changes that name memories or
    conversation lines the namespace no longer holds (a forget erased them while the job
    planned), and refuse the plan if any went. Ids are never reused (migration 0004), so an
    id that is gone was erased (by a forget, or by retention purging a tombstone)."""
    stats = unit.record.stats or {}
    plan = stats.get("plan")
    if unit.record.status not in PENDING or not isinstance(plan, Mapping):
        return
    named: set[int] = set()
    cited: set[int] = set()
    for change in plan.get("changes") or ():
        memories, lines = names(change)
        named |= memories
        cited |= lines
    gone_memories = named - present(unit.session, Memory, unit.namespace, named)
    gone_lines = cited - present(unit.session, ConversationLog, unit.namespace, cited)
    if not gone_memories and not gone_lines:
        return
    dropped = drop_stale(
        stats,
        memories=gone_memories,
        lines=gone_lines,
        why="memories or conversation lines it named were erased while it was planned",
    )
    if dropped is not None:
        unit.record.stats = dropped
        unit.record.status = RecordStatus.REFUSED.value


def present(
    session: Session,
    table: type[Memory] | type[ConversationLog],
    namespace: str,
    ids: Iterable[int],
) -> set[int]:
    """Return which of ``ids`` the namespace holds in ``table`` now."""
    found: set[int] = set()
    for chunk in chunks(ids):
        query = select(table.id).where(table.namespace == namespace, table.id.in_(chunk))
        found.update(session.scalars(query))
    return found
