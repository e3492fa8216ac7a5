"""What a search filter reads of a memory, kept in the lexical index: a broad filter is applied
there, to every document, instead of to a widened list of candidates afterwards.

A document's facets are its tags (``t\\x1f<tag>``) and its metadata pairs (``m\\x1f<key>\\x1f<value
text>``, compared as ``store.requests.metadata_equals`` compares them); its type and event time
are columns of their own. A metadata value longer than ``FACET_VALUE_CHARS`` is not a facet, so
a filter on such a value is not applied here (it still is in SQL, on every hit).

Pure: columns and filters in, a mask out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from store.lexical.columns import Columns
from store.requests import FACET_VALUE_CHARS, SearchFilters, event_micros, metadata_text

_SEP = "\x1f"

Mask = npt.NDArray[np.bool_]


def facets_of(tags: Iterable[str], metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """Return the facets of a memory with these tags and metadata."""
    names = {_tag(tag) for tag in tags}
    for key, value in metadata.items():
        text = metadata_text(value)
        if len(text) <= FACET_VALUE_CHARS:
            names.add(_pair(key, text))
    return tuple(sorted(names))


def _tag(tag: str) -> str:
    return f"t{_SEP}{tag}"


def _pair(key: str, text: str) -> str:
    return f"m{_SEP}{key}{_SEP}{text}"


class FacetIndex:
    """Which documents of one index pass a filter; built from the columns on first use."""

    def __init__(self, columns: Columns) -> None:
        facets = columns.facets
        self._n_docs = len(columns)
        self._columns = columns
        self._code = {name: code for code, name in enumerate(facets.names)}
        rows = np.repeat(np.arange(self._n_docs, dtype=np.int32), facets.lengths)
        order = np.argsort(facets.codes, kind="stable")  # by facet, rows ascending within
        self._rows = rows[order]
        self._bounds = np.zeros(len(facets.names) + 1, dtype=np.int64)
        counts = np.bincount(facets.codes, minlength=len(facets.names))
        np.cumsum(counts, out=self._bounds[1:])

    def allowed(self, filters: SearchFilters) -> Mask | None:
        """Return which documents pass what of ``filters`` the index holds; None: all of them."""
        mask: Mask | None = None
        for part in self._masks(filters):
            mask = part if mask is None else mask & part
        return mask

    def _masks(self, filters: SearchFilters) -> Iterable[Mask]:
        columns = self._columns
        if filters.types:
            names = columns.type.names
            wanted = [code for code, name in enumerate(names) if name in filters.types]
            yield np.isin(columns.type.codes, np.asarray(wanted, dtype=np.int32))
        if filters.since is not None:
            yield np.asarray(columns.event_us) >= event_micros(filters.since)
        if filters.until is not None:
            yield np.asarray(columns.event_us) < event_micros(filters.until)
        for tag in filters.tags:
            yield self._having(_tag(tag))
        for key, value in filters.metadata:
            if len(value) <= FACET_VALUE_CHARS:
                yield self._having(_pair(key, value))

    def _having(self, facet: str) -> Mask:
        mask = np.zeros(self._n_docs, dtype=np.bool_)
        code = self._code.get(facet)
        if code is not None:
            mask[self._rows[self._bounds[code] : self._bounds[code + 1]]] = True
        return mask
