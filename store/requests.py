"""What a search asks for: the request and its filters, parsed the same way for every front end.

The API and the CLI both call ``search_request`` with the raw parameters they received; a
problem is reported as ``ValidationFailed`` naming the parameter (``meta.0``, ``since``), which
each front end words its own way (a 422 with ``query.`` prefixed, a usage error).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from store.clock import ensure_utc, parse_timestamp
from store.errors import ValidationFailed


class FilterRow(Protocol):
    """What a filter reads of a memory (a search row or a memory view)."""

    @property
    def type(self) -> str: ...

    @property
    def tags(self) -> Sequence[str]: ...

    @property
    def event_time(self) -> datetime: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class SearchFilters:
    """Restrictions a hit must meet; empty fields restrict nothing."""

    types: tuple[str, ...] = ()  # memory type in this set
    tags: tuple[str, ...] = ()  # memory has ALL of these tags
    since: datetime | None = None  # event_time >= since
    until: datetime | None = None  # event_time < until
    # Exact whole-value equality; non-string values compare by their JSON text ("true", "3").
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return self == SearchFilters()

    def matches(self, row: FilterRow) -> bool:
        """Tell whether the memory passes every filter."""
        return (
            (not self.types or row.type in self.types)
            and all(tag in (row.tags or ()) for tag in self.tags)
            and (self.since is None or row.event_time >= self.since)
            and (self.until is None or row.event_time < self.until)
            and all(metadata_equals(row.metadata or {}, key, value) for key, value in self.metadata)
        )


def metadata_equals(metadata: Mapping[str, Any], key: str, value: str) -> bool:
    """Tell whether metadata[key] is exactly ``value`` (non-strings by their JSON text)."""
    return key in metadata and metadata_text(metadata[key]) == value


def metadata_text(stored: Any) -> str:
    """Return what a metadata filter compares a stored value with: a string itself, anything
    else its JSON text."""
    if isinstance(stored, str):
        return stored
    return json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """Given text, return what is wrong with it if it holds a lone surrogate, else None.

    JSON's "\\ud800" decodes to one, and so does a byte that is not UTF-8 on a command line
    (Python's surrogateescape); UTF-8 cannot encode it, so no database, index or response
    could hold the text.
    """
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    escaped = 0xDC80 <= code <= 0xDCFF  # what surrogateescape makes of the bytes 0x80-0xff
    byte = f", or the byte 0x{code - 0xDC00:02x} that is not UTF-8" if escaped else ""
    return (
        f"holds a lone surrogate (\\u{code:04x}{byte}) at character {found.start() + 1}:"
        " not Unicode text"
    )


#: The longest metadata value (as ``metadata_text``) an index filters on. A filter on a longer
#: value is left to SQL, which checks every hit; the lexical and the vector index agree on it.
FACET_VALUE_CHARS = 256

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def event_micros(moment: datetime) -> int:
    """Return an aware moment as microseconds since the epoch: how both indexes keep event times."""
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    namespace: str
    query: str
    k: int = 10
    filters: SearchFilters = field(default_factory=SearchFilters)
    min_score: float | None = None  # None -> settings.min_score
    # A search a person or an agent makes counts as a recall of what it found; the daemon's
    # own searches and benchmarks pass False.
    reinforce: bool = True


def search_request(
    *,
    namespace: str,
    query: str,
    k: int = 10,
    types: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    meta: Sequence[str] = (),
    min_score: float | None = None,
    reinforce: bool = True,
) -> SearchRequest:
    """Build a search from a front end's raw parameters.

    Raise ValidationFailed naming each bad parameter: a blank query, text that is not Unicode
    (``lone_surrogate``), a ``meta`` item that is not ``key=value``, a time that is not
    ISO-8601 or out of range, ``since`` after ``until``.
    """
    problems: list[tuple[str, str]] = []
    if not query.strip():
        problems.append(("q", "is blank"))
    elif (surrogate := lone_surrogate(query)) is not None:
        problems.append(("q", surrogate))
    filters = read_filters(types, tags, since, until, meta, problems)
    if min_score is not None and not math.isfinite(min_score):
        problems.append(("min_score", "must be a finite number"))
    elif min_score is not None and not 0.0 <= min_score <= 1.0:
        problems.append(("min_score", "must be between 0 and 1 (a hit's relevance)"))
    if problems:
        raise ValidationFailed(problems)
    return SearchRequest(
        namespace=namespace,
        query=query,
        k=k,
        filters=filters,
        min_score=min_score,
        reinforce=reinforce,
    )


def search_filters(
    *,
    types: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    meta: Sequence[str] = (),
) -> SearchFilters:
    """Build filters from a front end's raw parameters (as ``search_request``'s).

    Raise ValidationFailed naming each bad parameter.
    """
    problems: list[tuple[str, str]] = []
    filters = read_filters(types, tags, since, until, meta, problems)
    if problems:
        raise ValidationFailed(problems)
    return filters


def read_filters(
    types: Sequence[str],
    tags: Sequence[str],
    since: datetime | str | None,
    until: datetime | str | None,
    meta: Sequence[str],
    problems: list[tuple[str, str]],
) -> SearchFilters:
    """Return the filters the raw parameters ask for, adding to ``problems`` what is wrong
    with them: a time that is not ISO-8601, ``since`` after ``until``, a ``meta`` item that is
    not ``key=value``, a type, tag or ``meta`` item that is not Unicode text."""
    for name, values in (("type", types), ("tag", tags)):
        problems.extend(
            (f"{name}.{index}", surrogate)
            for index, value in enumerate(values)
            if (surrogate := lone_surrogate(value)) is not None
        )
    start = _moment("since", since, problems)
    end = _moment("until", until, problems)
    if start is not None and end is not None and start > end:
        problems.append(("since", "is after until"))
    pairs = _meta_pairs(meta, problems)
    return SearchFilters(
        types=tuple(types), tags=tuple(tags), since=start, until=end, metadata=pairs
    )


def _moment(
    name: str, value: datetime | str | None, problems: list[tuple[str, str]]
) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value) if isinstance(value, str) else ensure_utc(value)
    except ValueError as exc:
        # A well-formed time may still fall outside what a UTC datetime holds (year 9999 at
        # -14:00): say that, not that it is malformed.
        out_of_range = isinstance(value, datetime) or "out of range" in str(exc)
        text = "out of range" if out_of_range else f"not an ISO-8601 time: {value!r}"
        problems.append((name, text))
        return None


def _meta_pairs(
    pairs: Sequence[str], problems: list[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for index, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        surrogate = lone_surrogate(pair)
        if surrogate is not None:
            problems.append((f"meta.{index}", surrogate))
        elif not sep or not key:
            problems.append((f"meta.{index}", f"expected key=value, got {pair!r}"))
        else:
            out.append((key, value))
    return tuple(out)
