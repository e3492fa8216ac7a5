"""Search: gather candidates from the lexical and vector indexes, check them against SQL, rank.

SQL is the truth: every candidate, anchor or spread, is re-read from SQL and dropped unless it
is active and matches the filters, so a lagging index can add noise but never a removed memory.
The scoring itself is pure (``store.search.scoring``); this module only fetches the values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from itertools import islice

from loguru import logger

from store.lexical.cache import LexicalCache
from store.lexical.source import SqlLexicalSource
from store.lexical.view import LexicalView
from store.reads.memories import MemoryReads
from store.reads.search import ReadAhead, SearchReads
from store.requests import SearchFilters, SearchRequest
from store.search.pending import PendingVectors, cosines, merged
from store.search.query_shape import (
    QueryShape,
    Reading,
    Vector,
    query_terms,
    query_vector,
    shape_query,
    weigh,
)
from store.search.ranking import (
    Breakdown,
    Evidence,
    MemorySource,
    Ranked,
    Seen,
    judged,
    rank,
)
from store.search.scoring import coverage, lexical_support, mix_scores, parse_periods
from store.settings import RetrievalSettings
from store.vector.embedder import EmbedderError
from store.vector.index import VectorHit, VectorIndex, VectorIndexError
from store.views import MemoryView

__all__ = [
    "Breakdown",
    "Evidence",
    "Hit",
    "MemorySource",
    "Ranked",
    "SearchResult",
    "Searcher",
    "Seen",
    "query_shape",
    "rank",
    "supports",
]

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
class Hit:
    memory: MemoryView
    score: float
    breakdown: Breakdown
    via: str  # "anchor" (found by the indexes) or "spread" (added by association)


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    hits: tuple[Hit, ...]
    degraded: tuple[str, ...] = ()  # why results may be worse than usual


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
        # by the caller (store.vector.health), so no health read per search (which memories
        # of its namespace wait for their vectors is one indexed read, store.search.pending).
        self._notes = notes or _no_notes
        self._pending = PendingVectors(reads, memories)
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
        notes = self._notes(request.namespace)  # a rebuild or backlog explains missing vectors
        if not (degraded or notes or any(seen.hits for seen in evidence.readings)):
            degraded = self._vectorless(request)
        degraded = (*degraded, *notes)
        ranked = rank(evidence, rows, request, self.settings, now=now)
        # A memory deactivated since it was ranked is left out, so a search may return fewer.
        views = self._memories.active(request.namespace, [r.memory_id for r in ranked])
        ranked = tuple(r for r in ranked if r.memory_id in views)
        texts = {r.memory_id: views[r.memory_id].content for r in ranked}
        ranked = tuple(judged(ranked, texts, evidence))
        # min_score asks whether anything is relevant: when no hit reaches it, nothing is.
        threshold = self.settings.min_score if request.min_score is None else request.min_score
        if threshold > 0 and all(r.breakdown.relevance < threshold for r in ranked):
            ranked = ()
        hits = tuple(
            Hit(memory=views[r.memory_id], score=r.score, breakdown=r.breakdown, via=r.via)
            for r in ranked
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
        embedded: dict[str, Vector] = {}  # a chat's readings share texts: each embedded once
        shape = self._weighed(shape, embedded)
        waiting = self._waiting(request.namespace, among, broad)
        answers = [
            self._vector_hits(
                request, reading, config.dense_candidates, among, broad, embedded, waiting
            )
            for reading in shape.readings
        ]
        seen: list[Seen] = []
        for reading in shape.readings:
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
                    for text, weight in reading.lexical
                ],
                config.lexical_candidates,
            )
            sessions = mix_scores(
                [
                    (view.search_sessions(text, SESSION_CANDIDATES), weight)
                    for text, weight in reading.lexical
                ],
                SESSION_CANDIDATES,
            )
            rows.read(lexical)
            seen.append(Seen(lexical=lexical, sessions=sessions, hits=(), weight=reading.weight))
        # While the vector queries are still out: how far each reading's BM25 evidence counts.
        terms = query_terms(shape)
        idf = view.idf(frozenset().union(*terms))
        found = supports(view, [s.lexical for s in seen], terms, idf, config)
        seen = [replace(s, support=f) for s, f in zip(seen, found, strict=True)]
        degraded: tuple[str, ...] = ()
        for index, answer in enumerate(answers):
            hits, failed = answer()
            seen[index] = replace(seen[index], hits=hits)
            degraded = degraded or failed
        main, *also = seen
        evidence = Evidence(
            lexical=main.lexical,
            sessions=main.sessions,
            hits=main.hits,
            weight=main.weight,
            support=main.support,
            periods=parse_periods(shape.focus, now),
            also=tuple(also),
            terms=terms,
            echoes=shape.echoes,
            idf=idf,
        )
        return evidence, degraded

    def _vectorless(self, request: SearchRequest) -> tuple[str, ...]:
        """Why a search found no vector at all: its namespace holds no memory (a misspelt name
        would look like a search that found nothing), or, unfiltered, none of its memories'
        vectors is in the index and none waits in the outbox: the index lost them (a Chroma
        directory restored without them, a collection deleted by hand)."""
        namespace = request.namespace
        memories = len(self.lexical_view(namespace))
        if memories == 0:
            return (f"namespace {namespace!r} holds no memories",)
        if self.settings.dense_candidates <= 0 or not request.filters.empty:
            return ()  # no vector asked for, or a filter that may rightly match none
        if self._reads.pending_vectors(namespace, 0) is None:
            return ()
        return (
            f"the vector index holds no vectors for this namespace's {memories:,} memories "
            "(results are lexical only): `secretary index verify` tells, `secretary index "
            "rebuild` rebuilds it from SQL",
        )

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
        shape: Reading,
        n: int,
        among: frozenset[int] | None,
        broad: SearchFilters | None = None,
        embedded: dict[str, Vector] | None = None,
        waiting: Future[dict[int, Vector]] | None = None,
    ) -> Callable[[], VectorAnswer]:
        """Embed the query and start the vector query beside the caller; return a function that
        waits for its answer: the nearest memories, or none and why. An index that just failed
        is skipped.

        ``broad`` filters are applied by the index, or after it by a wider pool (an older
        collection whose vectors do not carry what filters read). ``embedded`` keeps the
        embeddings of the search's texts, so that readings sharing a text embed it once;
        ``waiting`` gives the vectors of memories the index has yet to write (`_waiting`)."""
        failure = self._vector_failure
        if failure is not None and self._monotonic() < failure[0]:
            skipped: VectorAnswer = ([], (f"vector index unavailable: {failure[1]}",))
            return lambda: skipped
        try:
            index = self._index()
            if broad is not None and not index.filterable(request.namespace):
                n *= FILTERED_WIDENING
            vector = query_vector(shape, _embedding(index, {} if embedded is None else embedded))
        except (VectorIndexError, EmbedderError) as exc:
            failed = self._failed(exc)
            return lambda: failed
        pending = self._beside.submit(index.query, request.namespace, vector, n, among, broad)
        return partial(self._answer, pending, vector, n, waiting)

    def _waiting(
        self, namespace: str, among: frozenset[int] | None, broad: SearchFilters | None
    ) -> Future[dict[int, Vector]] | None:
        """Start embedding, beside the caller, the memories whose vectors the index has yet
        to write (``store.search.pending``) among those the vector query may return (``among``,
        ``broad``); None while the vector index is skipped."""
        failure = self._vector_failure
        if failure is not None and self._monotonic() < failure[0]:
            return None
        embed = self._embed_documents
        return self._beside.submit(self._pending.vectors, namespace, among, broad, embed)

    def _embed_documents(self, texts: list[str]) -> Vector:
        return self._index().embed_documents(texts)  # the index only if anything waits

    def _weighed(self, shape: QueryShape, embedded: dict[str, Vector]) -> QueryShape:
        """Return ``shape`` with its readings weighted by how far a closing question follows
        its chat (`weigh`), embedding into ``embedded``; as it is while the vector index is
        down (its readings' search reports that)."""
        failure = self._vector_failure
        if shape.follows is None or (failure is not None and self._monotonic() < failure[0]):
            return shape
        try:
            return weigh(shape, _embedding(self._index(), embedded))
        except (VectorIndexError, EmbedderError):
            return shape

    def _answer(
        self,
        pending: Future[list[VectorHit]],
        vector: Vector,
        n: int,
        waiting: Future[dict[int, Vector]] | None,
    ) -> VectorAnswer:
        try:
            hits = pending.result()
        except (VectorIndexError, EmbedderError) as exc:
            return self._failed(exc)
        self._vector_failure = None
        fresh = _fresh(waiting)
        return merged(hits, cosines(vector, fresh), n), ()

    def _failed(self, exc: Exception) -> VectorAnswer:
        """Skip the vector index for a while; return the answer of a search that it failed."""
        logger.warning(
            "vector index unavailable, searching lexically only for {:.0f} s: {}",
            VECTOR_RETRY_SECONDS,
            exc,
        )
        self._vector_failure = (self._monotonic() + VECTOR_RETRY_SECONDS, str(exc))
        return [], (f"vector index unavailable: {exc}",)


def _embedding(index: VectorIndex, embedded: dict[str, Vector]) -> Callable[[str], Vector]:
    """The index's query embedder, keeping each text's embedding in ``embedded``."""

    def embed(text: str) -> Vector:
        if text not in embedded:
            embedded[text] = index.embed_query(text)
        return embedded[text]

    return embed


def _fresh(waiting: Future[dict[int, Vector]] | None) -> dict[int, Vector]:
    """The vectors of memories waiting for the index, or none if embedding them failed (the
    search goes on as if none waited)."""
    if waiting is None:
        return {}
    try:
        return waiting.result()
    except Exception as exc:  # noqa: BLE001 - an extra of the search, never its failure
        logger.warning("could not embed the memories waiting for the vector index: {}", exc)
        return {}


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
        query,
        focus_lexical=settings.chat_focus_lexical,
        focus_dense=settings.chat_focus_dense,
        aside=settings.chat_aside,
    )


# A reading's lexical support is judged on this many of its best BM25 matches.
SUPPORT_MATCHES = 3


def supports(
    view: LexicalView,
    readings: Sequence[Mapping[int, float]],
    terms: Sequence[frozenset[str]],
    idf: Mapping[str, float],
    settings: RetrievalSettings,
) -> list[float]:
    """Return each reading's lexical support (``scoring.lexical_support``): the best share of
    the query's terms that one of its SUPPORT_MATCHES best BM25 matches holds (with the memory
    before it when BM25 reads that too), against ``settings.lexical_support``."""
    if settings.lexical_support <= 0:
        return [1.0 for _ in readings]
    found = []
    for lexical in readings:
        best = list(islice(lexical, SUPPORT_MATCHES))  # best first
        held = view.holding(best, idf.keys(), context=settings.lexical_context > 0)
        covered = max((coverage(terms, held.get(mid, ()), idf) for mid in best), default=0.0)
        found.append(lexical_support(covered, settings.lexical_support))
    return found
