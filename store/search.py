"""Search: gather candidates from the lexical and vector indexes, check them against SQL, rank.

SQL is the truth: every candidate, anchor or spread, is re-read from SQL and dropped unless it
is active and matches the filters, so a lagging index can add noise but never a removed memory.
The scoring itself is pure (``store.retrieval``); this module only fetches the values.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from loguru import logger

from secretary.config import RetrievalSettings
from store.embedder import EmbedderError
from store.lexical import LexDoc, LexicalCache, LexicalView
from store.models import Memory
from store.reads import Edge, LexicalRow, SearchRow
from store.repository import Repository
from store.retrieval import (
    Parts,
    Period,
    Spread,
    Terms,
    age_days,
    attenuate,
    dense_parts,
    final_score,
    importance_factor,
    links_of,
    merge_activation,
    parse_periods,
    period_part,
    recency_factor,
    relevance,
    session_part,
    spread_step,
    top_ids,
)
from store.vector_index import VectorHit, VectorIndex, VectorIndexError

# Sessions scored per query; a session outside the best ones adds nothing to its memories.
SESSION_CANDIDATES = 100
# A filtered search first asks SQL which memories pass the filters; when at most this many may,
# both indexes search only among them, so a rare match is found however far down it would
# rank. More than this and the filters are not selective: the pools are widened instead.
FILTER_CANDIDATES = 5000
# After the vector index fails, searches skip it (answering lexically, marked degraded) for
# this long: an unreachable Chroma server would otherwise cost every search its timeout.
VECTOR_RETRY_SECONDS = 30.0
# Rows per read while the lexical index is (re)built from SQL.
LEXICAL_PAGE = 5000


@dataclass(frozen=True, kw_only=True)
class SearchFilters:
    """Restrictions a hit must meet; empty fields restrict nothing."""

    types: tuple[str, ...] = ()  # memory type in this set
    tags: tuple[str, ...] = ()  # memory has ALL of these tags
    since: datetime | None = None  # event_time >= since
    until: datetime | None = None  # event_time < until
    # Exact whole-value equality; non-string values compare by their JSON text ("true", "3").
    metadata: tuple[tuple[str, str], ...] = ()

    def matches(self, row: SearchRow) -> bool:
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
    if key not in metadata:
        return False
    stored = metadata[key]
    if isinstance(stored, str):
        return stored == value
    return json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=False) == value


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    namespace: str
    query: str
    k: int = 10
    filters: SearchFilters = field(default_factory=SearchFilters)
    min_score: float | None = None  # None -> settings.min_score
    reinforce: bool = True  # the caller acts on it; Searcher itself never writes


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Every term of the final score, plus the parts of relevance (all unweighted)."""

    relevance: float
    lexical: float
    dense: float
    session: float
    period: float
    importance: float  # (importance / 10) * exp(-lambda * age)
    recency: float
    activation: float
    score: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Hit:
    memory: Memory
    score: float
    breakdown: Breakdown
    via: str  # "anchor" (found by the indexes) or "spread" (added by association)


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    hits: tuple[Hit, ...]
    degraded: tuple[str, ...] = ()  # why results may be worse than usual


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What the indexes said about one query, before SQL is consulted."""

    lexical: Mapping[int, float]  # memory_id -> BM25 / best, best first
    sessions: Mapping[str, float]  # session_id -> session BM25 / best
    hits: Sequence[VectorHit]  # nearest vectors, nearest first
    periods: tuple[Period, ...]


class MemorySource(Protocol):
    """Where ranking reads memories and relations: SQL for searches, a snapshot in benchmarks.

    Both reads of memories return active memories only.
    """

    def search_rows(self, namespace: str, ids: Iterable[int]) -> Mapping[int, SearchRow]: ...

    def active_memories(self, namespace: str, ids: Iterable[int]) -> Mapping[int, Memory]: ...

    def edges(self, namespace: str, ids: Iterable[int]) -> Sequence[Edge]: ...


class Searcher:
    """Answers searches of one store; reads only."""

    def __init__(
        self,
        *,
        repository: Repository,
        index: Callable[[], VectorIndex],
        lexical: LexicalCache,
        settings: RetrievalSettings,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._repository = repository
        self._index = index
        self._lexical = lexical
        self.settings = settings
        self._monotonic = monotonic
        self._vector_failure: tuple[float, str] | None = None  # (retry after, reason)

    def search(self, request: SearchRequest, *, now: datetime) -> SearchResult:
        """Return the best ``request.k`` active memories matching the filters, best first."""
        if request.k <= 0 or not request.query.strip():
            return SearchResult(hits=())
        evidence, degraded = self.evidence(request, now=now)
        hits = rank(evidence, self._repository, request, self.settings, now=now)
        return SearchResult(hits=hits, degraded=degraded)

    def evidence(
        self, request: SearchRequest, *, now: datetime, settings: RetrievalSettings | None = None
    ) -> tuple[Evidence, tuple[str, ...]]:
        """Query both indexes; a failing vector index leaves lexical evidence and a reason."""
        config = settings or self.settings
        among = self.passing(request)
        widen = FILTERED_WIDENING if among is None and not _unfiltered(request.filters) else 1
        view = self.lexical_view(request.namespace)
        hits, degraded = self._vector_hits(request, config.dense_candidates * widen, among)
        return (
            Evidence(
                lexical=view.search(request.query, config.lexical_candidates * widen, among),
                sessions=view.search_sessions(request.query, SESSION_CANDIDATES),
                hits=hits,
                periods=parse_periods(request.query, now),
            ),
            degraded,
        )

    def lexical_view(self, namespace: str) -> LexicalView:
        """Return the namespace's BM25 index, refreshed to the current revision."""
        revision = self._repository.revision(namespace)  # read before the loaders, as required

        def load_all() -> Iterator[LexDoc]:  # a page at a time: see store.lexical
            after_id = 0
            while rows := self._repository.lexical_rows(
                namespace, after_id=after_id, limit=LEXICAL_PAGE
            ):
                yield from lexical_docs(rows)
                after_id = rows[-1].memory_id

        def load_since(after_id: int) -> list[LexDoc]:
            return lexical_docs(self._repository.lexical_rows(namespace, after_id=after_id))

        return self._lexical.get(namespace, revision, load_all, load_since)

    def passing(self, request: SearchRequest) -> frozenset[int] | None:
        """Return the memories that pass the request's filters, if filtered and few enough."""
        filters = request.filters
        if _unfiltered(filters):
            return None
        rows = self._repository.filtered_rows(
            request.namespace,
            types=filters.types,
            since=filters.since,
            until=filters.until,
            metadata=filters.metadata,
            limit=FILTER_CANDIDATES,
        )
        return None if rows is None else frozenset(row.id for row in rows if filters.matches(row))

    def _vector_hits(
        self, request: SearchRequest, n: int, among: frozenset[int] | None
    ) -> tuple[list[VectorHit], tuple[str, ...]]:
        """Return the nearest memories, or none and why, skipping an index that just failed."""
        failure = self._vector_failure
        if failure is not None and self._monotonic() < failure[0]:
            return [], (f"vector index unavailable: {failure[1]}",)
        try:
            index = self._index()
            hits = index.query(request.namespace, index.embed_query(request.query), n, among)
        except (VectorIndexError, EmbedderError) as exc:
            logger.warning(
                "vector index unavailable, searching lexically only for {:.0f} s: {}",
                VECTOR_RETRY_SECONDS,
                exc,
            )
            self._vector_failure = (self._monotonic() + VECTOR_RETRY_SECONDS, str(exc))
            return [], (f"vector index unavailable: {exc}",)
        self._vector_failure = None
        return hits, ()


# Filters that many memories pass are applied after retrieval, so such a search looks further
# down both lists.
FILTERED_WIDENING = 4


def _unfiltered(filters: SearchFilters) -> bool:
    return filters == SearchFilters()


def lexical_docs(rows: Sequence[LexicalRow]) -> list[LexDoc]:
    """Turn rows into BM25 documents: the date in words first, so "May 2023" matches."""
    return [
        LexDoc(
            memory_id=row.memory_id,
            text=f"{_spoken_date(row.event_time)} {row.content}",
            session_key=row.session_id,
        )
        for row in rows
    ]


def _spoken_date(moment: datetime) -> str:
    return f"{moment.day} {moment:%B} {moment.year}"


# -- ranking -----------------------------------------------------------------------------------


def rank(
    evidence: Evidence,
    source: MemorySource,
    request: SearchRequest,
    settings: RetrievalSettings,
    *,
    now: datetime,
) -> tuple[Hit, ...]:
    """Rank the evidence: anchors by relevance, then memories added by spreading, then cut.

    Reads rows and relations from ``source``; everything else is pure. A memory deactivated
    between the first read and the last is dropped, so a search may return fewer than k.
    """
    namespace, filters = request.namespace, request.filters
    dense = dense_parts((hit.memory_id, hit.similarity) for hit in evidence.hits)
    candidates = list(dict.fromkeys([*evidence.lexical, *dense]))
    rows = _usable(source.search_rows(namespace, candidates), filters)
    parts = {mid: _parts(rows[mid], evidence, dense) for mid in rows}
    relevances = {mid: relevance(p, settings) for mid, p in parts.items()}
    anchors = top_ids(relevances, settings.anchors)
    rows = {mid: rows[mid] for mid in anchors}
    seeds = {mid: relevances[mid] for mid in anchors[: settings.spread_seeds]}
    activation = _spread(seeds, rows, source, request, settings)
    for mid in rows.keys() - parts.keys():
        parts[mid] = _parts(rows[mid], evidence, dense)
    breakdowns = {
        mid: _breakdown(row, parts[mid], activation.get(mid, 0.0), settings, now)
        for mid, row in rows.items()
    }
    threshold = settings.min_score if request.min_score is None else request.min_score
    kept = {mid: b.score for mid, b in breakdowns.items() if b.score >= threshold}
    best = top_ids(kept, request.k)
    memories = source.active_memories(namespace, best)
    anchor_set = set(anchors)
    return tuple(
        Hit(
            memory=memories[mid],
            score=breakdowns[mid].score,
            breakdown=breakdowns[mid],
            via="anchor" if mid in anchor_set else "spread",
        )
        for mid in best
        if mid in memories
    )


def _usable(rows: Mapping[int, SearchRow], filters: SearchFilters) -> dict[int, SearchRow]:
    return {mid: row for mid, row in rows.items() if filters.matches(row)}


def _parts(row: SearchRow, evidence: Evidence, dense: Mapping[int, float]) -> Parts:
    return Parts(
        lexical=evidence.lexical.get(row.id, 0.0),
        dense=dense.get(row.id, 0.0),
        session=session_part(row.session_id, evidence.sessions),
        period=period_part(row.event_time, evidence.periods),
    )


def _spread(
    seeds: Mapping[int, float],
    rows: dict[int, SearchRow],
    source: MemorySource,
    request: SearchRequest,
    settings: RetrievalSettings,
) -> dict[int, float]:
    """Spread activation from the seeds over timeline and relations, adding what it reaches.

    ``rows`` gains every active, matching memory reached; the result is memory_id ->
    activation. Each hop reads the new memories' rows (their timeline links) and relations.
    """
    activation: dict[int, float] = {}
    frontier = {mid: Spread(value=value, origin=mid) for mid, value in seeds.items()}
    for hop in range(settings.spread_depth):
        if not frontier or settings.spread_fanout == 0:
            break
        links = _links(frontier, rows, source, request.namespace)
        reached = spread_step(frontier, links, fanout=settings.spread_fanout)
        new = [mid for mid in reached if mid not in rows]
        rows.update(_usable(source.search_rows(request.namespace, new), request.filters))
        reached = {mid: spread for mid, spread in reached.items() if mid in rows}
        merge_activation(activation, reached)
        if hop + 1 < settings.spread_depth:
            frontier = attenuate(reached, settings.spread_decay)
    return activation


def _links(
    frontier: Mapping[int, Spread],
    rows: Mapping[int, SearchRow],
    source: MemorySource,
    namespace: str,
) -> dict[int, list[tuple[int, float]]]:
    ids = sorted(frontier)
    relations: dict[int, list[tuple[int, int, float]]] = {mid: [] for mid in ids}
    for edge in source.edges(namespace, ids):
        for end in (edge.source_id, edge.target_id):
            if end in relations:
                relations[end].append((edge.source_id, edge.target_id, edge.strength))
    return {mid: links_of(mid, rows[mid].prev_id, rows[mid].next_id, relations[mid]) for mid in ids}


def _breakdown(
    row: SearchRow, parts: Parts, activation: float, settings: RetrievalSettings, now: datetime
) -> Breakdown:
    age = age_days(now, row.event_time)
    terms = Terms(
        relevance=relevance(parts, settings),
        importance=importance_factor(
            row.base_importance, age, settings.half_life_days, pinned=row.pinned
        ),
        recency=recency_factor(age, settings.recency_half_life_days),
        activation=activation,
    )
    return Breakdown(
        relevance=terms.relevance,
        lexical=parts.lexical,
        dense=parts.dense,
        session=parts.session,
        period=parts.period,
        importance=terms.importance,
        recency=terms.recency,
        activation=activation,
        score=final_score(terms, settings),
    )
