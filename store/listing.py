"""Listing a namespace's memories, page by page: the request, its cursor, and the use case.

Pages go by id, ascending. A cursor is opaque to clients (it says where the last page ended); a
memory added while a client pages gets a larger id than any it has seen, so paging is stable:
nothing is skipped or shown twice, and the new memory comes last. Filters are those of search
(type, tags, event time, metadata exact) plus status; by default only active memories.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from store.database import Database
from store.errors import ValidationFailed
from store.kinds import MemoryStatus
from store.reads.listing import Page
from store.requests import SearchFilters, read_filters

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
STATUSES = tuple(status.value for status in MemoryStatus)
_CURSOR_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ListRequest:
    namespace: str
    filters: SearchFilters = field(default_factory=SearchFilters)
    statuses: tuple[str, ...] = (MemoryStatus.ACTIVE.value,)
    after: int = 0
    limit: int = DEFAULT_LIMIT


def encode_cursor(after: int) -> str:
    """The cursor of the page that starts after memory ``after``."""
    data = json.dumps({"v": _CURSOR_VERSION, "after": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """Return the id a cursor continues after. Raise ValueError if it is not one we gave out."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise ValueError("not a cursor this API gave out") from None
    if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION:
        raise ValueError("not a cursor this API gave out")
    after = data.get("after")
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after < 2**63:
        raise ValueError("not a cursor this API gave out")
    return after


def list_request(
    *,
    namespace: str,
    types: Sequence[str] = (),
    tags: Sequence[str] = (),
    statuses: Sequence[str] = (),
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    meta: Sequence[str] = (),
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> ListRequest:
    """Build a listing from a front end's raw parameters.

    Raise ValidationFailed naming each bad parameter: an unknown status, a time that is not
    ISO-8601, ``since`` after ``until``, a ``meta`` item that is not ``key=value``, a cursor
    that is not one we gave out, a limit outside 1..MAX_LIMIT.
    """
    problems: list[tuple[str, str]] = []
    unknown = [status for status in statuses if status not in STATUSES]
    if unknown:
        problems.append(("status", f"{unknown[0]!r} is not one of {', '.join(STATUSES)}"))
    filters = read_filters(types, tags, since, until, meta, problems)
    after = 0
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            problems.append(("cursor", str(exc)))
    if not 1 <= limit <= MAX_LIMIT:
        problems.append(("limit", f"must be between 1 and {MAX_LIMIT}"))
    if problems:
        raise ValidationFailed(problems)
    return ListRequest(
        namespace=namespace,
        filters=filters,
        statuses=tuple(dict.fromkeys(statuses)) or (MemoryStatus.ACTIVE.value,),
        after=after,
        limit=limit,
    )


@dataclass(frozen=True, kw_only=True)
class Listed:
    page: Page
    next_cursor: str | None


def list_memories(db: Database, request: ListRequest) -> Listed:
    """Return one page of the request's memories and the cursor of the next (None at the end)."""
    filters = request.filters
    python_side = bool(filters.tags or filters.metadata)
    page = db.listing.page(
        request.namespace,
        after=request.after,
        limit=request.limit,
        statuses=request.statuses,
        types=filters.types,
        since=filters.since,
        until=filters.until,
        keep=filters.matches if python_side else None,
    )
    cursor = encode_cursor(page.next_after) if page.next_after is not None else None
    return Listed(page=page, next_cursor=cursor)
