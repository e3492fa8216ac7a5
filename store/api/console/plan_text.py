"""A stored plan told in words, as the run page tells a record's diff (pure).

A plan awaiting approval has no operations with images yet: its changes sit in its record's
``stats["plan"]``. Each operation becomes a line with the memories' texts as they read now.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from store.operations import (
    CarryRecalls,
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
    decode_operation,
    referenced_ids,
)

TextLookup = Callable[[Collection[int]], Mapping[int, str]]


@dataclass(frozen=True, kw_only=True)
class PlannedChange:
    """One change of a plan: its label, its operations as lines, and the texts it would
    retire or rewrite (``before``) beside the texts it would write (``after``)."""

    label: str
    lines: tuple[str, ...]
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


def plan_changes(stats: Mapping[str, Any], lookup: TextLookup) -> list[PlannedChange]:
    """Given a pending plan's record stats and a text lookup, return its changes in words."""
    plan = stats.get("plan")
    items = plan.get("changes") if isinstance(plan, Mapping) else None
    decoded: list[tuple[str, list[Operation]]] = []
    for item in items or ():
        if isinstance(item, Mapping):
            ops = [decode_operation(op) for op in item.get("operations") or ()]
            decoded.append((str(item.get("label", "")), ops))
    texts = lookup(referenced_ids(op for _, ops in decoded for op in ops))
    return [_change(label, ops, texts) for label, ops in decoded]


def _change(label: str, ops: list[Operation], texts: Mapping[int, str]) -> PlannedChange:
    before: list[str] = []
    after: list[str] = []
    for op in ops:
        if isinstance(op, SetStatus) and op.status != "active":
            before.append(f"#{op.memory_id} {texts.get(op.memory_id, '?')}")
        elif isinstance(op, CreateMemory):
            after.append(f"new {op.type}: {op.content}")
        elif isinstance(op, UpdateMemory) and "content" in op.changes:
            before.append(f"#{op.memory_id} {texts.get(op.memory_id, '?')}")
            after.append(f"#{op.memory_id} {op.changes['content']}")
    return PlannedChange(
        label=label,
        lines=tuple(tell(op, texts) for op in ops),
        before=tuple(before),
        after=tuple(after),
    )


def _ref(ref: int | str, texts: Mapping[int, str]) -> str:
    if isinstance(ref, int):
        return f'#{ref} "{texts.get(ref, "?")}"'
    return f"the new memory {ref!r}"


def tell(op: Operation, texts: Mapping[int, str]) -> str:
    """Given an operation and memory texts by id, return it as a line."""
    if isinstance(op, CreateMemory):
        return f'new {op.type} {op.key!r}: "{op.content}"'
    if isinstance(op, UpdateMemory):
        fields = ", ".join(f"{k} -> {v!r}" for k, v in op.changes.items())
        return f"{_ref(op.memory_id, texts)}: {fields}"
    if isinstance(op, SetStatus):
        by = f" by {_ref(op.replaced_by, texts)}" if op.replaced_by is not None else ""
        return f"{_ref(op.memory_id, texts)} becomes {op.status}{by}"
    if isinstance(op, CreateRelation):
        return f"{_ref(op.source, texts)} -{op.type}-> {_ref(op.target, texts)}"
    if isinstance(op, InheritRelations):
        froms = ", ".join(f"#{i}" for i in op.from_ids)
        return f"{_ref(op.to, texts)} takes the relations of {froms}"
    if isinstance(op, CarryRecalls):
        return f"{_ref(op.to, texts)} takes the recalls of #{op.from_id}"
    if isinstance(op, Purge):
        return f"{_ref(op.memory_id, texts)} is purged"
    return repr(op)
