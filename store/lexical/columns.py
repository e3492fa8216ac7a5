"""The documents of a lexical index as columns of arrays: what it is built from and saved as.

One row per memory, in ascending memory id: its id and version, its event time, its tokens, its
filter facets (tags and metadata pairs), its session and its type. Text columns are codes into
a table of names (the vocabulary, the sessions, ...), so a million memories are a few flat
arrays, which can be memory-mapped from a saved index, gathered (``take``) and merged without
touching Python objects per token. A merge keeps in its tables only the names its rows use:
an index merged without a forgotten memory holds none of its words.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Int32s = npt.NDArray[np.int32]


class TokenisedDoc(Protocol):
    """One memory, tokenised: what a row of the columns holds."""

    @property
    def memory_id(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def event_us(self) -> int: ...
    @property
    def tokens(self) -> Sequence[str]: ...
    @property
    def facets(self) -> Sequence[str]: ...
    @property
    def session_key(self) -> str | None: ...
    @property
    def type(self) -> str: ...


@dataclass(frozen=True, eq=False)
class Multi:
    """A column of several names per row: row ``i`` holds ``codes[offsets[i]:offsets[i + 1]]``."""

    lengths: Ints
    codes: Int32s
    names: list[str]
    offsets: Ints = field(init=False)

    def __post_init__(self) -> None:
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        object.__setattr__(self, "offsets", offsets)

    def take(self, rows: Ints) -> Multi:
        lengths = self.lengths[rows]
        return Multi(lengths, _take_ranges(self.codes, self.offsets[rows], lengths), self.names)


@dataclass(frozen=True, eq=False)
class Single:
    """A column of at most one name per row (-1: none)."""

    codes: Int32s
    names: list[str]

    def take(self, rows: Ints) -> Single:
        return Single(self.codes[rows], self.names)


@dataclass(frozen=True, eq=False)
class Columns:
    keys: Ints  # memory ids, ascending
    versions: Ints
    event_us: Ints  # event time, microseconds since the epoch (UTC)
    tokens: Multi  # names: the vocabulary
    facets: Multi  # names: "t\x1f<tag>", "m\x1f<key>\x1f<value text>"
    session: Single
    type: Single

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, rows: Ints) -> Columns:
        """Return the columns of these rows (positions), in that order, with the same tables."""
        return Columns(
            keys=self.keys[rows],
            versions=self.versions[rows],
            event_us=self.event_us[rows],
            tokens=self.tokens.take(rows),
            facets=self.facets.take(rows),
            session=self.session.take(rows),
            type=self.type.take(rows),
        )

    @classmethod
    def from_docs(cls, docs: Iterable[TokenisedDoc]) -> Columns:
        """Gather tokenised documents (a stream) into columns, sorted by memory id.

        Raise ValueError if two share a memory id.
        """
        tables: list[dict[str, int]] = [{}, {}, {}, {}]  # vocabulary, facets, sessions, types
        vocab, facet_names, sessions, types = tables
        keys, versions, times = array("q"), array("q"), array("q")
        tokens, n_tokens, facets, n_facets = array("i"), array("q"), array("i"), array("q")
        session_of, type_of = array("i"), array("i")
        for doc in docs:
            keys.append(doc.memory_id)
            versions.append(doc.version)
            times.append(doc.event_us)
            tokens.extend([vocab.setdefault(token, len(vocab)) for token in doc.tokens])
            n_tokens.append(len(doc.tokens))
            facets.extend([facet_names.setdefault(name, len(facet_names)) for name in doc.facets])
            n_facets.append(len(doc.facets))
            key = doc.session_key
            session_of.append(-1 if key is None else sessions.setdefault(key, len(sessions)))
            type_of.append(types.setdefault(doc.type, len(types)))
        columns = cls(
            keys=np.array(keys, dtype=np.int64),
            versions=np.array(versions, dtype=np.int64),
            event_us=np.array(times, dtype=np.int64),
            tokens=Multi(np.array(n_tokens, np.int64), np.array(tokens, np.int32), list(vocab)),
            facets=Multi(
                np.array(n_facets, np.int64), np.array(facets, np.int32), list(facet_names)
            ),
            session=Single(np.array(session_of, np.int32), list(sessions)),
            type=Single(np.array(type_of, np.int32), list(types)),
        )
        return columns.sorted()

    def sorted(self) -> Columns:
        """Return these rows in ascending memory id. Raise ValueError on a repeated id."""
        keys = self.keys
        if keys.size > 1 and not bool(np.all(keys[1:] > keys[:-1])):
            order = np.argsort(keys, kind="stable")
            if bool(np.any(np.diff(keys[order]) == 0)):
                raise ValueError("lexical index: duplicate memory_id in documents")
            return self.take(order)
        return self


def merge(parts: Sequence[Columns]) -> Columns:
    """Return the rows of all parts as one set of columns, sorted by memory id, whose tables
    hold only the names the rows use (sessions and types numbered by first use, as a build
    from the same documents numbers them). Raise ValueError on a repeated id."""
    merged = Columns(
        keys=_concat([p.keys for p in parts], np.int64),
        versions=_concat([p.versions for p in parts], np.int64),
        event_us=_concat([p.event_us for p in parts], np.int64),
        tokens=_merge_multi([p.tokens for p in parts]),
        facets=_merge_multi([p.facets for p in parts]),
        session=_merge_single([p.session for p in parts]),
        type=_merge_single([p.type for p in parts]),
    ).sorted()
    return Columns(
        keys=merged.keys,
        versions=merged.versions,
        event_us=merged.event_us,
        tokens=_compact_multi(merged.tokens),
        facets=_compact_multi(merged.facets),
        session=_compact_single(merged.session),
        type=_compact_single(merged.type),
    )


def _concat(arrays: Sequence[npt.NDArray[np.generic]], dtype: type[np.generic]) -> Ints:
    if not arrays:
        return np.zeros(0, dtype=dtype)
    out: Ints = np.concatenate(arrays).astype(dtype, copy=False)
    return out


def _global_codes(names: list[str], table: dict[str, int]) -> Int32s:
    return np.array([table.setdefault(name, len(table)) for name in names], dtype=np.int32)


def _merge_multi(columns: Sequence[Multi]) -> Multi:
    table: dict[str, int] = {}
    codes = [_global_codes(c.names, table)[c.codes] for c in columns]
    return Multi(
        _concat([c.lengths for c in columns], np.int64),
        _concat(codes, np.int32).astype(np.int32),
        list(table),
    )


def _merge_single(columns: Sequence[Single]) -> Single:
    table: dict[str, int] = {}
    codes = []
    for column in columns:
        remap = np.append(_global_codes(column.names, table), np.int32(-1))
        codes.append(remap[column.codes])  # -1 indexes the appended -1
    return Single(_concat(codes, np.int32).astype(np.int32), list(table))


def _compact_multi(column: Multi) -> Multi:
    used = np.bincount(column.codes, minlength=len(column.names)) > 0
    if bool(used.all()):
        return column
    new_code = (np.cumsum(used) - 1).astype(np.int32)
    names = [name for name, keep in zip(column.names, used.tolist(), strict=True) if keep]
    return Multi(column.lengths, new_code[column.codes], names)


def _compact_single(column: Single) -> Single:
    present = column.codes[column.codes >= 0]
    used, first = np.unique(present, return_index=True)
    order = used[np.argsort(first, kind="stable")]  # codes in order of first use
    new_code = np.full(len(column.names) + 1, -1, dtype=np.int32)
    new_code[order] = np.arange(order.size, dtype=np.int32)
    names = [column.names[code] for code in order.tolist()]
    return Single(new_code[column.codes], names)  # -1 indexes the last entry, -1


def _take_ranges(flat: Int32s, starts: Ints, lengths: Ints) -> Int32s:
    """Concatenate ``flat[starts[i]:starts[i] + lengths[i]]`` for every i, without a loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=flat.dtype)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    out: Int32s = np.asarray(flat)[np.arange(total, dtype=np.int64) + shift]
    return out
