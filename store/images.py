"""Row images: plain JSON-able snapshots of rows, for maintenance records, undo and export.

Memories and relations are imaged whenever a record changes them; a conversation log line only
when an ingest updates it (``on_conflict="update"``): new lines are the daemon's input, not a
change to undo.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Mapper

from store.clock import parse_timestamp
from store.models import ConversationLog, Memory, MemoryRelation

# Fields that describe what a memory *is* (and pinned, what a person decided about it); a change
# to any of them bumps `version` and means the vector index must re-embed it. Links and access
# statistics are not among them.
CONTENT_FIELDS = frozenset(
    {
        "content",
        "type",
        "tags",
        "importance",
        "event_time",
        "session_id",
        "status",
        "metadata",
        "pinned",
        "replaced_by_id",
    }
)


def _column_keys(
    model: type[Memory] | type[MemoryRelation] | type[ConversationLog],
) -> list[tuple[str, str]]:
    """Return (attribute, column name) pairs of a model, in table order."""
    mapper: Mapper[Any] = sa_inspect(model)
    return [(attr.key, attr.columns[0].name) for attr in mapper.column_attrs]


MEMORY_COLUMNS = _column_keys(Memory)
RELATION_COLUMNS = _column_keys(MemoryRelation)
LOG_COLUMNS = _column_keys(ConversationLog)
_DATETIME_FIELDS = {"last_accessed", "event_time", "created_at", "updated_at"}
_LOG_DATETIME_FIELDS = {"timestamp", "created_at"}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def memory_image(memory: Memory) -> dict[str, Any]:
    """Return every column of a memory as JSON-able data (keys are column names)."""
    return {column: _plain(getattr(memory, attr)) for attr, column in MEMORY_COLUMNS}


def relation_image(relation: MemoryRelation) -> dict[str, Any]:
    return {column: _plain(getattr(relation, attr)) for attr, column in RELATION_COLUMNS}


def log_image(log: ConversationLog) -> dict[str, Any]:
    """Return every column of a conversation log line as JSON-able data."""
    return {column: _plain(getattr(log, attr)) for attr, column in LOG_COLUMNS}


def memory_values(image: dict[str, Any]) -> dict[str, Any]:
    """Given a memory image, return attribute values ready to set on a Memory."""
    values: dict[str, Any] = {}
    for attr, column in MEMORY_COLUMNS:
        value = image[column]
        if column in _DATETIME_FIELDS and value is not None:
            value = parse_timestamp(value)
        values[attr] = value
    return values


def relation_values(image: dict[str, Any]) -> dict[str, Any]:
    values = {attr: image[column] for attr, column in RELATION_COLUMNS}
    values["created_at"] = parse_timestamp(image["created_at"])
    return values


def log_values(image: dict[str, Any]) -> dict[str, Any]:
    """Given a log line's image, return attribute values ready to set on a ConversationLog."""
    return {
        attr: parse_timestamp(image[column]) if column in _LOG_DATETIME_FIELDS else image[column]
        for attr, column in LOG_COLUMNS
    }
