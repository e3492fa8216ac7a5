"""Which incoming items are already in the store, and which name a stored id with other content.

A memory is recognised by its ``external_id`` or, without one, by its content, session and (if
given) timestamp; a log line by its idempotency key. An item that finds a stored row is the same
item when every field it gives equals the row as it is or as it was first stored (maintenance may
have changed the row since: re-sending the original is not a conflict). Otherwise it conflicts:
the writer then refuses the batch, naming each such item, unless asked to update the row. Two
items of one batch with the same identity and different fields conflict with each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.clock import parse_timestamp
from store.images import memory_image
from store.kinds import MemoryStatus
from store.models import ConversationLog, MaintenanceOperation, Memory
from store.schemas import LogIn, MemoryIn
from store.text import content_hash

OnConflict = Literal["error", "update"]
ON_CONFLICT: tuple[OnConflict, ...] = ("error", "update")
UPDATE_HINT = "to change it, ask for an update (API: on_conflict=update; CLI: --update)"

# Fields of an item compared with the stored memory; content always, the rest only if given.
_MEMORY_FIELDS = ("content", "type", "tags", "importance", "metadata", "timestamp", "session_id")
_LOG_FIELDS = ("session_id", "role", "content", "timestamp", "pair_id")


@dataclass(frozen=True, kw_only=True)
class Found:
    """A stored row an item names: its id and the fields the item gives differently."""

    row_id: int
    differs: tuple[str, ...]  # () : the same item
    kind: str = "memory"  # or "log line"
    status: str = MemoryStatus.ACTIVE.value
    replaced_by: int | None = None


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """For each item of a batch (by index): the stored row it names, or the earlier item of the
    batch it repeats; and the problems of items that contradict another item of the batch."""

    found: Mapping[int, Found] = field(default_factory=dict)
    repeats: Mapping[int, int] = field(default_factory=dict)  # index -> index of its first
    problems: Mapping[int, str] = field(default_factory=dict)  # index -> what is wrong

    def conflicts(self, labels: Sequence[str], *, update: bool, hint: str) -> list[tuple[str, str]]:
        """The problems that stop the batch, in item order: items contradicting an earlier one,
        and unless ``update`` is asked for, items that name a stored row with other content (a
        retired memory with other content, even then)."""
        problems = dict(self.problems)
        for index, found in self.found.items():
            if not found.differs:
                continue
            fields = ", ".join(found.differs)
            if found.status != MemoryStatus.ACTIVE:
                by = f", replaced by {found.replaced_by}" if found.replaced_by else ""
                problems[index] = (
                    f"names memory {found.row_id}, which is {found.status}{by}, with different "
                    f"{fields}: only active memories change"
                )
            elif not update:
                problems[index] = (
                    f"names {found.kind} {found.row_id} with different {fields}: {hint}"
                )
        return [(labels[index], problems[index]) for index in sorted(problems)]

    def updates(self) -> dict[int, Found]:
        """The items (by index) that change a stored row, when updating is asked for."""
        return {index: found for index, found in self.found.items() if found.differs}


def default_labels(count: int) -> list[str]:
    return [f"item {index}" for index in range(count)]


# -- memories ----------------------------------------------------------------------------------


def identity(item: MemoryIn) -> tuple[Any, ...]:
    """How a memory item is recognised: its external id, else its content, session and time."""
    if item.external_id:
        return ("ext", item.external_id)
    return ("hash", content_hash(item.content), item.session_id, item.timestamp)


def given_fields(item: MemoryIn) -> dict[str, Any]:
    """The fields an item gives (content always), as they compare with a stored memory."""
    given = item.model_fields_set | {"content"}
    values: dict[str, Any] = {}
    for name in _MEMORY_FIELDS:
        if name in given:
            value = getattr(item, name)
            if value is None:  # null given (timestamp, importance): as if left out
                continue
            values[name] = frozenset(value) if name == "tags" else value
    if "pinned" in given:
        values["pinned"] = item.pinned
    return values


def fingerprint(item: MemoryIn | LogIn) -> str:
    """A digest of what an item gives, equal for items that are the same item."""
    fields = given_fields(item) if isinstance(item, MemoryIn) else log_fields(item)
    plain = {
        name: sorted(value) if isinstance(value, frozenset) else value
        for name, value in fields.items()
    }
    text = json.dumps(plain, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def memory_differences(item: MemoryIn, image: Mapping[str, Any]) -> tuple[str, ...]:
    """Given an item and a memory image, return the fields the item gives differently."""
    stored = {
        "content": image["content"],
        "type": image["type"],
        "tags": frozenset(image["tags"] or ()),
        "importance": image["importance"],
        "metadata": image["metadata"] or {},
        "timestamp": parse_timestamp(image["event_time"]),
        "session_id": image["session_id"],
        "pinned": image["pinned"],
    }
    return tuple(name for name, value in given_fields(item).items() if stored[name] != value)


def resolve_memories(
    session: Session, namespace: str, items: Sequence[MemoryIn], labels: Sequence[str]
) -> Resolution:
    """Find the stored memories the items name, and the items that repeat or contradict an
    earlier item of the batch."""
    existing = _existing_memories(session, namespace, items)
    found: dict[int, Found] = {}
    repeats: dict[int, int] = {}
    problems: dict[int, str] = {}
    first: dict[tuple[Any, ...], int] = {}
    for index, item in enumerate(items):
        key = identity(item)
        if key in first:
            earlier = items[first[key]]
            if given_fields(earlier) != given_fields(item):
                problems[index] = (
                    f"{_describe(key)} is also on {labels[first[key]]}, with different content"
                )
            repeats[index] = first[key]
            continue
        first[key] = index
        row = existing.get(key)
        if row is not None:
            found[index] = Found(
                row_id=row.id,
                differs=memory_differences(item, memory_image(row)),
                status=row.status,
                replaced_by=row.replaced_by_id,
            )
    _forgive_originals(session, items, found)
    return Resolution(found=found, repeats=repeats, problems=problems)


def _describe(key: tuple[Any, ...]) -> str:
    return f"external_id {key[1]!r}" if key[0] == "ext" else "the same content, session and time"


def _forgive_originals(
    session: Session, items: Sequence[MemoryIn], found: dict[int, Found]
) -> None:
    """An item that differs from the memory as it is now but equals it as first stored (before
    maintenance changed it) is the same item."""
    differing = {f.row_id: index for index, f in found.items() if f.differs}
    for memory_id, after in _creation_images(session, list(differing)).items():
        index = differing[memory_id]
        if not memory_differences(items[index], after):
            found[index] = Found(row_id=memory_id, differs=())


def _creation_images(session: Session, ids: Sequence[int]) -> dict[int, Mapping[str, Any]]:
    """Return memory id -> the image its creating operation recorded (if a record holds it)."""
    images: dict[int, Mapping[str, Any]] = {}
    for chunk in _chunks(sorted(ids)):
        rows = session.execute(
            select(MaintenanceOperation.target_id, MaintenanceOperation.after)
            .where(
                MaintenanceOperation.target_kind == "memory",
                MaintenanceOperation.op == "create_memory",
                MaintenanceOperation.target_id.in_(chunk),
            )
            .order_by(MaintenanceOperation.id)
        )
        for memory_id, after in rows:
            if after is not None and "content" in after:
                images.setdefault(memory_id, after)
    return images


def _existing_memories(
    session: Session, namespace: str, items: Sequence[MemoryIn]
) -> dict[tuple[Any, ...], Memory]:
    found: dict[tuple[Any, ...], Memory] = {}
    external = sorted({item.external_id for item in items if item.external_id})
    for chunk in _chunks(external):
        rows = session.scalars(
            select(Memory).where(Memory.namespace == namespace, Memory.external_id.in_(chunk))
        )
        found.update({("ext", row.external_id): row for row in rows})
    hashes = sorted({content_hash(item.content) for item in items if not item.external_id})
    for chunk in _chunks(hashes):
        matches = session.scalars(
            select(Memory)
            # A line without an external id is the stored memory of the same content, session
            # and time, whether or not that one was given an external id.
            .where(Memory.namespace == namespace, Memory.content_hash.in_(chunk))
            .order_by(Memory.id)
        )
        for row in matches:
            found.setdefault(("hash", row.content_hash, row.session_id, None), row)
            found.setdefault(("hash", row.content_hash, row.session_id, row.event_time), row)
    return found


# -- conversation logs -------------------------------------------------------------------------


def log_fields(item: LogIn) -> dict[str, Any]:
    given = item.model_fields_set | {"session_id", "role", "content", "timestamp"}
    return {name: getattr(item, name) for name in _LOG_FIELDS if name in given}


def resolve_logs(
    session: Session, namespace: str, items: Sequence[LogIn], labels: Sequence[str]
) -> Resolution:
    """Like resolve_memories, for conversation log lines (recognised by idempotency key)."""
    keys = [item.key() for item in items]
    existing: dict[str, ConversationLog] = {}
    for chunk in _chunks(sorted(set(keys))):
        rows = session.scalars(
            select(ConversationLog).where(
                ConversationLog.namespace == namespace,
                ConversationLog.idempotency_key.in_(chunk),
            )
        )
        existing.update({row.idempotency_key: row for row in rows})
    found: dict[int, Found] = {}
    repeats: dict[int, int] = {}
    problems: dict[int, str] = {}
    first: dict[str, int] = {}
    for index, (item, key) in enumerate(zip(items, keys, strict=True)):
        if key in first:
            if log_fields(items[first[key]]) != log_fields(item):
                problems[index] = (
                    f"idempotency_key {key!r} is also on {labels[first[key]]}, with different "
                    "content"
                )
            repeats[index] = first[key]
            continue
        first[key] = index
        row = existing.get(key)
        if row is not None:
            stored = {name: getattr(row, name) for name in _LOG_FIELDS}
            differs = tuple(n for n, v in log_fields(item).items() if stored[n] != v)
            found[index] = Found(row_id=row.id, differs=differs, kind="log line")
    return Resolution(found=found, repeats=repeats, problems=problems)


def _chunks(values: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]
