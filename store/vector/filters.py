"""What a search filter reads of a memory, as vector metadata, and a filter as a Chroma ``where``.

Each vector carries its memory's type, event time (microseconds since the epoch), tags (a list)
and metadata pairs (``m.<key>``: the value's text as ``store.requests.metadata_equals`` compares
it; values longer than ``FACET_VALUE_CHARS`` are left out, and so is a filter on one: SQL checks
every hit anyway). Pure: values in, dicts out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from store.requests import FACET_VALUE_CHARS, SearchFilters, event_micros, metadata_text

Where = dict[str, Any]
_TYPE, _TIME, _TAGS, _META = "type", "t", "tags", "m."


def filter_fields(
    *, type: str, event_time: datetime, tags: Iterable[str], metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the vector metadata a filter reads of a memory with these fields."""
    fields: dict[str, Any] = {_TYPE: type, _TIME: event_micros(event_time)}
    tag_list = sorted(set(tags))
    if tag_list:  # Chroma refuses an empty list
        fields[_TAGS] = tag_list
    for key, value in metadata.items():
        text = metadata_text(value)
        if len(text) <= FACET_VALUE_CHARS:
            fields[_META + key] = text
    return fields


def where_of(filters: SearchFilters) -> Where | None:
    """Return the Chroma ``where`` of what ``filters`` ask that vectors carry; None: nothing."""
    clauses: list[Where] = []
    if filters.types:
        clauses.append({_TYPE: {"$in": list(filters.types)}})
    if filters.since is not None:
        clauses.append({_TIME: {"$gte": event_micros(filters.since)}})
    if filters.until is not None:
        clauses.append({_TIME: {"$lt": event_micros(filters.until)}})
    clauses.extend({_TAGS: {"$contains": tag}} for tag in filters.tags)
    clauses.extend(
        {_META + key: {"$eq": value}}
        for key, value in filters.metadata
        if len(value) <= FACET_VALUE_CHARS
    )
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
