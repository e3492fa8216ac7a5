"""Where the lexical cache reads a namespace's memories: SQL, through the search path's reads."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

import numpy as np

from store.lexical.cache import Versions
from store.lexical.index import LexDoc
from store.reads.search import LexicalRow, SearchReads

# Rows per read while the lexical index is (re)built from SQL.
LEXICAL_PAGE = 5000


class SqlLexicalSource:
    """``store.lexical.cache.LexicalSource`` over SQL."""

    def __init__(self, reads: SearchReads) -> None:
        self._reads = reads

    def revisions(self, namespace: str) -> tuple[int, int]:
        return self._reads.revisions(namespace)

    def all_docs(self, namespace: str) -> Iterator[LexDoc]:
        # A page at a time: a build tokenises a chunk at a time (see store.lexical.index).
        after_id = 0
        while rows := self._reads.lexical_rows(namespace, after_id=after_id, limit=LEXICAL_PAGE):
            yield from lexical_docs(rows)
            after_id = rows[-1].memory_id

    def docs_after(self, namespace: str, after_id: int) -> list[LexDoc]:
        return lexical_docs(self._reads.lexical_rows(namespace, after_id=after_id))

    def docs_of(self, namespace: str, ids: Sequence[int]) -> list[LexDoc]:
        return lexical_docs(self._reads.lexical_rows_of(namespace, ids))

    def versions(self, namespace: str) -> Versions:
        rows = np.array(self._reads.memory_versions(namespace), dtype=np.int64).reshape(-1, 3)
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        live = rows[:, 2].astype(np.bool_)
        return Versions(
            active_ids=rows[live, 0], active_versions=rows[live, 1], stored_ids=rows[:, 0]
        )


def lexical_docs(rows: Iterable[LexicalRow]) -> list[LexDoc]:
    """Turn rows into BM25 documents: the date in words first, so "May 2023" matches."""
    return [
        LexDoc(
            memory_id=row.memory_id,
            text=f"{_spoken_date(row.event_time)} {row.content}",
            session_key=row.session_id,
            version=row.version,
            type=row.type,
            event_time=row.event_time,
            tags=tuple(json.loads(row.tags_json) or ()),
            metadata=json.loads(row.metadata_json) or {},
        )
        for row in rows
    ]


def _spoken_date(moment: datetime) -> str:
    return f"{moment.day} {moment:%B} {moment.year}"
