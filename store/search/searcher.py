"""Search: gather candidates from the lexical and vector indexes, check them against SQL, rank.

SQL is the truth: every candidate, anchor or spread, is re-read from SQL and dropped unless it
is active and matches the filters, so a lagging index can add noise but never a removed memory.
The scoring itself is pure (``store.search.scoring``); this module only fetches the values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from typing import Protocol

from loguru import logger

from store.lexical.cache import LexicalCache
from store.lexical.source import SqlLexicalSource
from store.lexical.view import LexicalView
from store.neighbours import together
from store.reads.memories import MemoryReads
from store.reads.search import ReadAhead, SearchReads, SearchRow
from store.requests import SearchFilters, SearchRequest
from store.search.query_shape import QueryShape, query_vector, shape_query
from store.search.scoring import (
    Parts,
    Period,
    Spread,
    Terms,
    age_days,
    attenuate,
    capped_activation,
    dense_parts,
    final_score,
    importance_factor,
    lexical_parts,
    links_of,
    merge_activation,
    mix_scores,
    parse_periods,
    period_part,
    recency_factor,
    relevance,
    session_part,
    spread_step,
    top_ids,
    worth_reading,
)
from store.settings import RetrievalSettings
from store.vector.embedder import EmbedderError
from store.vector.index import VectorHit, VectorIndex, VectorIndexError
from store.views import Edge, MemoryView

# Sessions scored per query; a session outside the best ones adds nothing to its memories.
SESSION_CANDIDATES = 100
# A filtered search first asks SQL which memories pass the filters; when at most this many may,
# both indexes search only among them, so a rare match is found however far down it would
# rank. More than this and the indexes apply the filters themselves, to every document.
FILTER_CANDIDATES = 5000
# After the vector index fails, searches skip it (answering lexically, marked degraded) for
# this long: an unreachable Chroma server would otherwise cost every search its timeout.
VECTOR_RETRY_SECONDS = 30.0
# Vector queries in flight at once, each beside the lexical side of its own search.
VECTOR_QUERY_THREADS = 4


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
class Ranked:
    """A memory's place in the ranking, before its row is read for the answer."""

    memory_id: int
    score: float
    breakdown: Breakdown
    via: str  # "anchor" (found by the indexes) or "spread" (added by association)


@dataclass(frozen=True, kw_only=True)
class Hit:
    memory: MemoryView
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
    """Where ranking reads memories and relations: SQL (``SearchReads``) for searches, a
    snapshot in benchmarks. ``search_rows`` returns active memories only."""

    def search_rows(self, namespace: str, ids: Iterable[int]) -> Mapping[int, SearchRow]: ...

    def edges(self, namespace: str, ids: Iterable[int]) -> Sequence[Edge]: ...


class Searcher:
    """Answers searches of one store; reads only (recording the recall is the caller's)."""

    def __init__(
        self,
        *,
        reads: SearchReads,
        memories: MemoryReads,
        index: Callable[[], VectorIndex],
        lexical: LexicalCache,
        settings: RetrievalSettings,
        monotonic: Callable[[], float] = time.monotonic,
        notes: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        self._reads = reads
        self._memories = memories
        self._index = index
        self._lexical = lexical
        self._lexical_source = SqlLexicalSource(reads)
        self.settings = settings
        self._monotonic = monotonic
        # What is known about a namespace's vector side (a rebuild pending, a backlog): cached
        # by the caller (store.vector.health), so no SQL per search.
        self._notes = notes or _no_notes
        self._vector_failure: tuple[float, str] | None = None  # (retry after, reason)
        # The vector query runs beside the lexical side of its search: Chroma, embedded or
        # over HTTP, answers without holding the GIL, so BM25 and the SQL read of the lexical
        # candidates take little of the search's time. (It gains only with the embedder's
        # threads not spinning after the query is embedded: see store.vector.embedder.)
        self._beside = ThreadPoolExecutor(VECTOR_QUERY_THREADS, thread_name_prefix="vector-query")

    def close(self) -> None:
        """Wait for vector queries in flight and stop their threads."""
        self._beside.shutdown(wait=True, cancel_futures=True)

    def search(self, request: SearchRequest, *, now: datetime) -> SearchResult:
        """Return the best ``request.k`` active memories matching the filters, best first."""
        if request.k <= 0 or not request.query.strip():
            return SearchResult(hits=())
        rows = ReadAhead(self._reads, request.namespace)
        evidence, degraded = self.evidence(request, rows, now=now)
        degraded = (*degraded, *self._notes(request.namespace))
        ranked = rank(evidence, rows, request, self.settings, now=now)
        # A memory deactivated since it was ranked is left out, so a search may return fewer.
        views = self._memories.active(request.namespace, [r.memory_id for r in ranked])
        hits = tuple(
            Hit(memory=views[r.memory_id], score=r.score, breakdown=r.breakdown, via=r.via)
            for r in ranked
            if r.memory_id in views
        )
        return SearchResult(hits=hits, degraded=degraded)

    def evidence(
        self, request: SearchRequest, rows: ReadAhead, *, now: datetime
    ) -> tuple[Evidence, tuple[str, ...]]:
        """Query both indexes; a failing vector index leaves lexical evidence and a reason.

        While the vector index answers, ``rows`` reads the rows of the lexical candidates.
        """
        config = self.settings
        shape = query_shape(request.query, config)
        among = self.passing(request)
        broad = None if among is not None or request.filters.empty else request.filters
        view = self.lexical_view(request.namespace)
        vector_answer = self._vector_hits(request, shape, config.dense_candidates, among, broad)
        lexical = mix_scores(
            [
                (
                    view.search(
                        text,
                        config.lexical_candidates,
                        among,
                        broad,
                        context=config.lexical_context,
                    ),
                    weight,
                )
                for text, weight in shape.lexical
            ],
            config.lexical_candidates,
        )
        sessions = mix_scores(
            [
                (view.search_sessions(text, SESSION_CANDIDATES), weight)
                for text, weight in shape.lexical
            ],
            SESSION_CANDIDATES,
        )
        rows.read(lexical)
        hits, degraded = vector_answer()
        evidence = Evidence(
            lexical=lexical, sessions=sessions, hits=hits, periods=parse_periods(shape.focus, now)
        )
        return evidence, degraded

    def lexical_view(self, namespace: str) -> LexicalView:
        """Return the namespace's BM25 index, brought up to the namespace's current revision."""
        return self._lexical.get(namespace, self._lexical_source)

    def passing(self, request: SearchRequest) -> frozenset[int] | None:
        """Return the memories that pass the request's filters, if filtered and few enough."""
        filters = request.filters
        if filters.empty:
            return None
        rows = self._reads.filtered_rows(
            request.namespace,
            types=filters.types,
            since=filters.since,
            until=filters.until,
            metadata=filters.metadata,
            limit=FILTER_CANDIDATES,
        )
        return None if rows is None else frozenset(row.id for row in rows if filters.matches(row))

    def _vector_hits(
        self,
        request: SearchRequest,
        shape: QueryShape,
        n: int,
        among: frozenset[int] | None,
        broad: SearchFilters | None = None,
    ) -> Callable[[], VectorAnswer]:
        """Embed the query and start the vector query beside the caller; return a function that
        waits for its answer: the nearest memories, or none and why. An index that just failed
        is skipped.

        ``broad`` filters are applied by the index, or after it by a wider pool (an older
        collection whose vectors do not carry what filters read)."""
        failure = self._vector_failure
        if failure is not None and self._monotonic() < failure[0]:
            skipped: VectorAnswer = ([], (f"vector index unavailable: {failure[1]}",))
            return lambda: skipped
        try:
            index = self._index()
            if broad is not None and not index.filterable(request.namespace):
                n *= FILTERED_WIDENING
            vector = query_vector(shape, index.embed_query)
        except (VectorIndexError, EmbedderError) as exc:
            failed = self._failed(exc)
            return lambda: failed
        pending = self._beside.submit(index.query, request.namespace, vector, n, among, broad)
        return partial(self._answer, pending)

    def _answer(self, pending: Future[list[VectorHit]]) -> VectorAnswer:
        try:
            hits = pending.result()
        except (VectorIndexError, EmbedderError) as exc:
            return self._failed(exc)
        self._vector_failure = None
        return hits, ()

    def _failed(self, exc: Exception) -> VectorAnswer:
        """Skip the vector index for a while; return the answer of a search that it failed."""
        logger.warning(
            "vector index unavailable, searching lexically only for {:.0f} s: {}",
            VECTOR_RETRY_SECONDS,
            exc,
        )
        self._vector_failure = (self._monotonic() + VECTOR_RETRY_SECONDS, str(exc))
        return [], (f"vector index unavailable: {exc}",)


def _no_notes(_namespace: str) -> tuple[str, ...]:
    return ()


# What the vector side gives a search: its hits, nearest first, and why they may be missing.
VectorAnswer = tuple[list[VectorHit], tuple[str, ...]]


# A collection made before vectors carried what filters read cannot filter: a broad filter is
# applied after retrieval, so such a search looks further down its list.
FILTERED_WIDENING = 4


def query_shape(query: str, settings: RetrievalSettings) -> QueryShape:
    """Return how ``query`` is searched under ``settings`` (see ``store.search.query_shape``)."""
    return shape_query(
        query, focus_lexical=settings.chat_focus_lexical, focus_dense=settings.chat_focus_dense
    )


# -- ranking -----------------------------------------------------------------------------------


def rank(
    evidence: Evidence,
    source: MemorySource,
    request: SearchRequest,
    settings: RetrievalSettings,
    *,
    now: datetime,
) -> tuple[Ranked, ...]:
    """Rank the evidence: anchors by relevance, then memories added by spreading, then cut.

    Reads rows and relations from ``source``; everything else is pure.
    """
    namespace, filters = request.namespace, request.filters
    lexical = lexical_parts(evidence.lexical, settings.lexical_exponent)
    dense = dense_parts((hit.memory_id, hit.similarity) for hit in evidence.hits)
    # The lexical candidates' rows first (a search read them ahead), then only the dense
    # candidates that may still be anchors beside them.
    rows = _usable(source.search_rows(namespace, lexical), filters)
    most_added = settings.w_session * max(evidence.sessions.values(), default=0.0)
    most_added += settings.w_period if evidence.periods else 0.0
    others = [mid for mid in dense if mid not in lexical]
    others = worth_reading(rows, others, lexical, dense, most_added=most_added, settings=settings)
    rows.update(_usable(source.search_rows(namespace, others), filters))
    parts = {mid: _parts(rows[mid], evidence, lexical, dense) for mid in rows}
    relevances = {mid: relevance(p, settings) for mid, p in parts.items()}
    anchors = top_ids(relevances, settings.anchors)
    rows = {mid: rows[mid] for mid in anchors}
    seeds = {mid: relevances[mid] for mid in anchors[: settings.spread_seeds]}
    activation = _spread(seeds, rows, source, request, settings)
    for mid in rows.keys() - parts.keys():
        parts[mid] = _parts(rows[mid], evidence, lexical, dense)
    breakdowns = {
        mid: _breakdown(row, parts[mid], activation.get(mid, 0.0), settings, now)
        for mid, row in rows.items()
    }
    relevant = {mid for mid, b in breakdowns.items() if b.relevance > 0}
    _cap_unrelated(breakdowns, relevant & set(anchors), rows, parts, settings, now)
    threshold = settings.min_score if request.min_score is None else request.min_score
    kept = {mid: b.score for mid, b in breakdowns.items() if b.score >= threshold}
    anchor_set = set(anchors)
    return tuple(
        Ranked(
            memory_id=mid,
            score=breakdowns[mid].score,
            breakdown=breakdowns[mid],
            via="anchor" if mid in anchor_set else "spread",
        )
        for mid in top_ids(kept, request.k, prefer=relevant)
    )


def _cap_unrelated(
    breakdowns: dict[int, Breakdown],
    anchors: Iterable[int],
    rows: Mapping[int, SearchRow],
    parts: Mapping[int, Parts],
    settings: RetrievalSettings,
    now: datetime,
) -> None:
    """Keep each memory with no relevance of its own at most as high as the lowest anchor with
    some (ties go to the anchor): spreading adds it below what the query matched."""
    ceiling = min((breakdowns[mid].score for mid in anchors), default=None)
    if ceiling is None:
        return
    for mid, b in breakdowns.items():
        if b.relevance <= 0 and b.score > ceiling:
            rest = b.score - settings.w_act * b.activation
            capped = capped_activation(b.activation, rest, ceiling, settings.w_act)
            breakdowns[mid] = _breakdown(rows[mid], parts[mid], capped, settings, now)


def _usable(rows: Mapping[int, SearchRow], filters: SearchFilters) -> dict[int, SearchRow]:
    if filters.empty:  # most searches: no need to ask each of a few hundred rows
        return dict(rows)
    return {mid: row for mid, row in rows.items() if filters.matches(row)}


def _parts(
    row: SearchRow, evidence: Evidence, lexical: Mapping[int, float], dense: Mapping[int, float]
) -> Parts:
    """Score one memory's parts. A memory that replaced others (an update that superseded a
    fact, a summary that merged fragments) scores in its own session or theirs, the better:
    it answers for what it replaced, where that was said."""
    session = session_part(row.session_id, evidence.sessions)
    for replaced in row.replaced:
        session = max(session, session_part(replaced, evidence.sessions))
    return Parts(
        lexical=lexical.get(row.id, 0.0),
        dense=dense.get(row.id, 0.0),
        session=session,
        period=period_part(row.event_time, evidence.periods) if evidence.periods else 0.0,
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
    activation. Each hop reads the frontier's relations and its neighbours' rows (their
    sessions and times decide whether timeline neighbours belong together).
    """
    activation: dict[int, float] = {}
    seen: dict[int, SearchRow] = dict(rows)  # every usable row read, reached or not
    frontier = {mid: Spread(value=value, origin=mid) for mid, value in seeds.items()}
    for hop in range(settings.spread_depth):
        if not frontier or settings.spread_fanout == 0:
            break
        links = _links(frontier, seen, source, request, settings)
        reached = spread_step(frontier, links, fanout=settings.spread_fanout)
        reached = {mid: spread for mid, spread in reached.items() if mid in seen}
        rows.update((mid, seen[mid]) for mid in reached)
        merge_activation(activation, reached)
        if hop + 1 < settings.spread_depth:
            frontier = attenuate(reached, settings.spread_decay)
    return activation


def _links(
    frontier: Mapping[int, Spread],
    seen: dict[int, SearchRow],
    source: MemorySource,
    request: SearchRequest,
    settings: RetrievalSettings,
) -> dict[int, list[tuple[int, float]]]:
    """Return each frontier memory's links; ``seen`` gains the usable rows of its neighbours."""
    ids = sorted(frontier)
    relations: dict[int, list[tuple[int, int, float]]] = {mid: [] for mid in ids}
    for edge in source.edges(request.namespace, ids):
        for end in (edge.source_id, edge.target_id):
            if end in relations:
                relations[end].append((edge.source_id, edge.target_id, edge.strength))
    ends = {end for edges in relations.values() for edge in edges for end in edge[:2]}
    ends.update(n for mid in ids for n in (seen[mid].prev_id, seen[mid].next_id) if n is not None)
    new = [mid for mid in sorted(ends) if mid not in seen]
    seen.update(_usable(source.search_rows(request.namespace, new), request.filters))
    return {mid: links_of(mid, _timeline(seen[mid], seen, settings), relations[mid]) for mid in ids}


def _timeline(
    row: SearchRow, seen: Mapping[int, SearchRow], settings: RetrievalSettings
) -> list[int]:
    """Return the prev/next neighbours of ``row`` that belong together with it."""
    window = settings.timeline_window_minutes
    return [
        n
        for n in (row.prev_id, row.next_id)
        if n is not None
        and n in seen
        and together(row.session_id, row.event_time, seen[n].session_id, seen[n].event_time, window)
    ]


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
