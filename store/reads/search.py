"""The reads on the search path: Core statements built once, run on a plain connection.

A search reads a few hundred rows in four or five statements, so the ORM's per-statement and
per-row machinery, and building the statement each time, were most of its cost; these reads
skip both. Lookups of a list of ids select by primary key alone and check the namespace in
Python: given "namespace = ? AND id IN (...)", SQLite (without planner statistics) walks the
namespace's whole index instead of looking the ids up, ~14 ms instead of ~0.5 ms at 100k
memories.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Engine, Text, bindparam, case, cast, or_, select

from store.db import chunks
from store.kinds import MemoryStatus
from store.models import IndexOutbox, Memory, MemoryRelation, NamespaceState
from store.views import Edge

_MEMORIES = Memory.__table__.c
_RELATIONS = MemoryRelation.__table__.c
_ACTIVE = MemoryStatus.ACTIVE.value


@dataclass
class SearchRow:
    """The columns of an active memory that filtering and ranking read; treat it as read-only.

    Tags and metadata stay JSON text until a filter reads them: most searches have no filter,
    and decoding them for every candidate was a tenth of a search's time. Not a frozen
    dataclass, and made from positional values: a search makes hundreds, and a frozen,
    keyword-only one took 0.8 ms of it per 360 rows, against 0.1 ms.
    """

    id: int
    type: str
    tags_json: str
    metadata_json: str
    event_time: datetime
    session_id: str | None
    prev_id: int | None
    next_id: int | None
    base_importance: float
    pinned: bool
    content_hash: str = ""  # store.text.content_hash of its text: a chat's echoes are known by it
    # The sessions of the memories this one replaced (superseded or merged); not a column:
    # ``search_rows`` fills it in the same connection.
    replaced: frozenset[str] = frozenset()

    @cached_property
    def tags(self) -> list[str]:
        tags: list[str] = json.loads(self.tags_json)
        return tags

    @cached_property
    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = json.loads(self.metadata_json)
        return metadata


@dataclass(frozen=True, kw_only=True)
class LexicalRow:
    """What the lexical index holds of an active memory: its text and what a filter reads."""

    memory_id: int
    content: str
    event_time: datetime
    session_id: str | None
    version: int
    type: str
    tags_json: str  # JSON text, as in SearchRow
    metadata_json: str


_SEARCH_FIELDS = tuple(name for name in SearchRow.__dataclass_fields__ if name != "replaced")
_AS_TEXT = {"tags_json": _MEMORIES.tags, "metadata_json": _MEMORIES.metadata}
_SEARCH_COLUMNS = tuple(
    cast(_AS_TEXT[name], Text) if name in _AS_TEXT else _MEMORIES[name] for name in _SEARCH_FIELDS
)
_REPLACING = Memory.__table__.alias("replacing")
# Whether a memory replaced others: one probe of ix_memories_replaced_by per row, so that the
# sessions of what it replaced are read only for the few that did.
_REPLACED_ANY = select(_REPLACING.c.id).where(_REPLACING.c.replaced_by_id == _MEMORIES.id).exists()
_SEARCH_ROWS = select(_MEMORIES.namespace, _MEMORIES.status, _REPLACED_ANY, *_SEARCH_COLUMNS).where(
    _MEMORIES.id.in_(bindparam("ids", expanding=True))
)
# Metadata keys that are safe in a JSON path on every backend; others are checked in Python.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")

_EDGES = select(
    _RELATIONS.namespace,
    _RELATIONS.source_id,
    _RELATIONS.target_id,
    _RELATIONS.type,
    _RELATIONS.strength,
).where(
    or_(
        _RELATIONS.source_id.in_(bindparam("ids", expanding=True)),
        _RELATIONS.target_id.in_(bindparam("ids", expanding=True)),
    )
)

# The memories that others replaced, by replacement: (replacement, namespace, session).
_REPLACED = select(_MEMORIES.replaced_by_id, _MEMORIES.namespace, _MEMORIES.session_id).where(
    _MEMORIES.replaced_by_id.in_(bindparam("ids", expanding=True)),
    _MEMORIES.status != _ACTIVE,
    _MEMORIES.session_id.is_not(None),
)

_LEXICAL_COLUMNS = (
    _MEMORIES.id,
    _MEMORIES.content,
    _MEMORIES.event_time,
    _MEMORIES.session_id,
    _MEMORIES.version,
    _MEMORIES.type,
    cast(_MEMORIES.tags, Text),
    cast(_MEMORIES.metadata, Text),
)
_LEXICAL_ROWS = (
    select(*_LEXICAL_COLUMNS)
    .where(
        _MEMORIES.namespace == bindparam("namespace"),
        _MEMORIES.status == _ACTIVE,
        _MEMORIES.id > bindparam("after_id"),
    )
    .order_by(_MEMORIES.id)
)
_LEXICAL_OF = select(_MEMORIES.namespace, _MEMORIES.status, *_LEXICAL_COLUMNS).where(
    _MEMORIES.id.in_(bindparam("ids", expanding=True))
)
# Every memory of a namespace, any status: what the lexical index is compared with.
_VERSIONS = select(
    _MEMORIES.id, _MEMORIES.version, case((_MEMORIES.status == _ACTIVE, 1), else_=0)
).where(_MEMORIES.namespace == bindparam("namespace"))

_STATE = NamespaceState.__table__.c
_OUTBOX = IndexOutbox.__table__.c
_REVISION = select(_STATE.revision).where(_STATE.namespace == bindparam("namespace"))
_REVISIONS = select(_STATE.revision, _STATE.rewritten).where(
    _STATE.namespace == bindparam("namespace")
)


class SearchReads:
    """The search path's reads over one engine; every method opens a plain connection."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        """Return what ranking needs of the *active* memories of ``namespace`` among ``ids``,
        with the sessions of the memories each replaced."""
        out: dict[int, SearchRow] = {}
        replacing: list[int] = []
        replaced: dict[int, set[str]] = {}
        with self.engine.connect() as connection:
            for chunk in chunks(ids):
                rows = _all(connection, _SEARCH_ROWS, ids=chunk)
                for row_namespace, status, replaced_any, *values in rows:
                    if row_namespace == namespace and status == _ACTIVE:
                        row = SearchRow(*values)  # the columns are _SEARCH_FIELDS, in order
                        out[row.id] = row
                        if replaced_any:
                            replacing.append(row.id)
            for chunk in chunks(replacing):
                for replacement, row_namespace, session in _all(connection, _REPLACED, ids=chunk):
                    if row_namespace == namespace:
                        replaced.setdefault(replacement, set()).add(session)
        for mid, sessions in replaced.items():
            out[mid].replaced = frozenset(sessions)
        return out

    def pending_vectors(self, namespace: str, limit: int) -> list[int] | None:
        """Return the memories of ``namespace`` whose vectors the index has yet to write (the
        outbox's upserts; a memory changed twice once), by id; None when more than ``limit``
        memories wait."""
        query = (
            select(_OUTBOX.memory_id)
            .where(_OUTBOX.namespace == namespace, _OUTBOX.action == "upsert")
            .distinct()
            .limit(limit + 1)
        )
        with self.engine.connect() as connection:
            found = sorted(connection.execute(query).scalars())
        return None if len(found) > limit else found

    def filtered_rows(
        self,
        namespace: str,
        *,
        types: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        limit: int,
    ) -> list[SearchRow] | None:
        """Return the active memories that may pass these filters, or None if over ``limit``.

        A superset: type and time range are exact, a metadata pair is narrowed in SQL only when
        its value cannot be the JSON text of a non-string (e.g. "NETWORK", not "3" or "true"),
        and tags not at all; the caller checks each row exactly.
        """
        query = select(*_SEARCH_COLUMNS).where(
            _MEMORIES.namespace == namespace, _MEMORIES.status == _ACTIVE
        )
        if types:
            query = query.where(_MEMORIES.type.in_(list(types)))
        if since is not None:
            query = query.where(_MEMORIES.event_time >= since)
        if until is not None:
            query = query.where(_MEMORIES.event_time < until)
        for key, value in metadata:
            if _PLAIN_KEY.fullmatch(key) and not _is_json(value):
                query = query.where(_MEMORIES.metadata[key].as_string() == value)
        with self.engine.connect() as connection:
            rows = connection.execute(query.limit(limit + 1)).all()
        if len(rows) > limit:
            return None
        return [SearchRow(*values) for values in rows]

    def edges(self, namespace: str, ids: Iterable[int]) -> list[Edge]:
        """Return the relations of ``namespace`` touching any of ``ids``, strongest first."""
        out: list[Edge] = []
        with self.engine.connect() as connection:
            for chunk in chunks(ids):
                out.extend(
                    Edge(source_id=s, target_id=t, type=kind, strength=strength)
                    for row_namespace, s, t, kind, strength in _all(connection, _EDGES, ids=chunk)
                    if row_namespace == namespace
                )
        out.sort(key=lambda edge: -edge.strength)
        return out

    def lexical_rows(
        self, namespace: str, *, after_id: int = 0, limit: int | None = None
    ) -> list[LexicalRow]:
        """Return the active memories with id > ``after_id``, by id, for the lexical index.

        With ``limit``, only the first ``limit`` of them: a page, the next one after its last id.
        """
        statement = _LEXICAL_ROWS if limit is None else _LEXICAL_ROWS.limit(limit)
        with self.engine.connect() as connection:
            rows = _all(connection, statement, namespace=namespace, after_id=after_id)
        return [_lexical_row(values) for values in rows]

    def lexical_rows_of(self, namespace: str, ids: Iterable[int]) -> list[LexicalRow]:
        """Return the active memories of ``namespace`` among ``ids``, by id."""
        out: list[LexicalRow] = []
        with self.engine.connect() as connection:
            for chunk in chunks(ids):
                out.extend(
                    _lexical_row(values)
                    for row_namespace, status, *values in _all(connection, _LEXICAL_OF, ids=chunk)
                    if row_namespace == namespace and status == _ACTIVE
                )
        return sorted(out, key=lambda row: row.memory_id)

    def memory_versions(self, namespace: str) -> Sequence[tuple[int, int, int]]:
        """Return every memory of ``namespace`` (in no order): id, version, 1 if active else 0.

        Read straight from the driver's cursor: three integer columns of every memory, where
        SQLAlchemy's row objects cost ~20x the query itself (seconds at a million memories).
        """
        with self.engine.connect() as connection:
            result = connection.execute(_VERSIONS, {"namespace": namespace})
            rows: Sequence[tuple[int, int, int]] = (
                result.cursor.fetchall() if result.cursor is not None else []
            )
        return rows

    def revision(self, namespace: str) -> int:
        """Return the namespace's revision: it grows with every committed change of it."""
        with self.engine.connect() as connection:
            value = connection.execute(_REVISION, {"namespace": namespace}).scalar()
        return int(value or 0)

    def revisions(self, namespace: str) -> tuple[int, int]:
        """Return the namespace's revision and how often a text in it changed or went."""
        with self.engine.connect() as connection:
            row = connection.execute(_REVISIONS, {"namespace": namespace}).first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))


class ReadAhead:
    """The rows of one search, read from SQL once: those of the lexical candidates while the
    vector index answers, the rest when ranking asks for them."""

    def __init__(self, reads: SearchReads, namespace: str) -> None:
        self._reads = reads
        self._namespace = namespace
        self._rows: dict[int, SearchRow | None] = {}  # None: not active in the namespace

    def read(self, ids: Iterable[int]) -> None:
        new = [mid for mid in ids if mid not in self._rows]
        if new:
            found = self._reads.search_rows(self._namespace, new)
            self._rows.update((mid, found.get(mid)) for mid in new)

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        self._check(namespace)
        wanted = list(ids)
        self.read(wanted)
        return {mid: row for mid in wanted if (row := self._rows[mid]) is not None}

    def edges(self, namespace: str, ids: Iterable[int]) -> Sequence[Edge]:
        self._check(namespace)
        return self._reads.edges(namespace, ids)

    def _check(self, namespace: str) -> None:
        if namespace != self._namespace:
            raise ValueError(f"rows of namespace {self._namespace!r} asked for {namespace!r}")


def _lexical_row(values: Sequence[Any]) -> LexicalRow:
    memory_id, content, event_time, session_id, version, kind, tags, metadata = values
    return LexicalRow(
        memory_id=memory_id,
        content=content,
        event_time=event_time,
        session_id=session_id,
        version=version,
        type=kind,
        tags_json=tags,
        metadata_json=metadata,
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _all(connection: Connection, statement: Any, **params: object) -> Sequence[Any]:
    return connection.execute(statement, params).all()
