"""Ranking of a query's evidence: relevance parts per reading, anchors, spreading activation.

Pure but for reading rows and relations from a ``MemorySource`` (SQL for searches, a snapshot
in benchmarks); ``store.search.searcher`` gathers the evidence and reads the hits' rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Protocol

from store.lexical.index import term_sets
from store.neighbours import together
from store.reads.search import SearchRow
from store.requests import SearchFilters, SearchRequest
from store.search.scoring import (
    Parts,
    Period,
    ReadingParts,
    Spread,
    Terms,
    age_days,
    attenuate,
    capped_activation,
    coverage,
    dense_parts,
    final_score,
    importance_factor,
    lexical_parts,
    links_of,
    match,
    merge_activation,
    period_part,
    recency_factor,
    relevance,
    session_part,
    spread_step,
    top_ids,
    worth_reading,
)
from store.settings import RetrievalSettings
from store.vector.index import VectorHit
from store.views import Edge


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Every term of the final score, the parts of the match (all unweighted), and the hit's
    relevance (absolute, comparable across queries and stores)."""

    relevance: float  # 0-1, ``store.search.scoring.relevance``; 0 until the hit is read
    match: float  # the weighted parts: ranks within this query only
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
    similarity: float  # the best cosine of its vector with the query's readings (or at most)


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What the indexes said about one reading of a query (``store.search.query_shape``)."""

    lexical: Mapping[int, float]  # memory_id -> BM25 / best, best first
    sessions: Mapping[str, float]  # session_id -> session BM25 / best
    hits: Sequence[VectorHit]  # nearest vectors, nearest first
    weight: float = 1.0  # of the relevance this reading gives
    support: float = 1.0  # how far its lexical evidence counts (scoring.lexical_support)


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What the indexes said about one query, before SQL is consulted: its main reading's
    evidence, the periods it names, and its other readings' (a chat read as given)."""

    lexical: Mapping[int, float]  # memory_id -> BM25 / best, best first
    sessions: Mapping[str, float]  # session_id -> session BM25 / best
    hits: Sequence[VectorHit]  # nearest vectors, nearest first
    periods: tuple[Period, ...]
    weight: float = 1.0  # of the main reading's match (a chat that asks nothing: below 1)
    support: float = 1.0  # of the main reading's lexical evidence (scoring.lexical_support)
    also: tuple[Seen, ...] = ()
    terms: tuple[frozenset[str], ...] = ()  # the query's BM25 term sets (query_terms)
    echoes: frozenset[str] = frozenset()  # content hashes of the turns a chat quotes
    idf: Mapping[str, float] = field(default_factory=dict)  # of the terms, in the namespace

    @property
    def readings(self) -> tuple[Seen, ...]:
        main = Seen(
            lexical=self.lexical,
            sessions=self.sessions,
            hits=self.hits,
            weight=self.weight,
            support=self.support,
        )
        return (main, *self.also)


class MemorySource(Protocol):
    """Where ranking reads memories and relations: SQL (``SearchReads``) for searches, a
    snapshot in benchmarks. ``search_rows`` returns active memories only."""

    def search_rows(self, namespace: str, ids: Iterable[int]) -> Mapping[int, SearchRow]: ...

    def edges(self, namespace: str, ids: Iterable[int]) -> Sequence[Edge]: ...


def rank(
    evidence: Evidence,
    source: MemorySource,
    request: SearchRequest,
    settings: RetrievalSettings,
    *,
    now: datetime,
) -> tuple[Ranked, ...]:
    """Rank the evidence: anchors by match, then memories added by spreading, then cut.

    Reads rows and relations from ``source``; everything else is pure.
    """
    namespace, filters = request.namespace, request.filters
    readings = _reading_parts(evidence, settings)
    # The lexical candidates' rows first (a search read them ahead), then only the dense
    # candidates that may still be anchors beside them.
    rows = _usable(source.search_rows(namespace, _candidates(r.lexical for r in readings)), filters)
    others = [mid for mid in _candidates(r.dense for r in readings) if mid not in rows]
    hashes = {mid: row.content_hash for mid, row in rows.items()}
    others = worth_reading(hashes, others, readings, settings=settings)
    rows.update(_usable(source.search_rows(namespace, others), filters))
    parts = {mid: _parts(rows[mid], evidence, readings, settings) for mid in rows}
    matches = {mid: match(p, settings) for mid, p in parts.items()}
    anchors = top_ids(matches, settings.anchors)
    rows = {mid: rows[mid] for mid in anchors}
    seeds = {mid: matches[mid] for mid in anchors[: settings.spread_seeds]}
    activation = _spread(seeds, rows, source, request, settings)
    for mid in rows.keys() - parts.keys():
        parts[mid] = _parts(rows[mid], evidence, readings, settings)
    breakdowns = {
        mid: _breakdown(row, parts[mid], activation.get(mid, 0.0), settings, now)
        for mid, row in rows.items()
    }
    relevant = {mid for mid, b in breakdowns.items() if b.match > 0}
    _cap_unrelated(breakdowns, relevant & set(anchors), rows, parts, settings, now)
    kept = {mid: b.score for mid, b in breakdowns.items()}
    anchor_set = set(anchors)
    similar = similarities(evidence)
    return tuple(
        Ranked(
            memory_id=mid,
            score=breakdowns[mid].score,
            breakdown=breakdowns[mid],
            via="anchor" if mid in anchor_set else "spread",
            similarity=similar(mid),
        )
        for mid in top_ids(kept, request.k, prefer=relevant)
    )


def judged(ranked: Iterable[Ranked], texts: Mapping[int, str], evidence: Evidence) -> list[Ranked]:
    """Return the ranked memories with their relevance (``store.search.scoring.relevance``)
    from their cosines and their ``texts``' share of the query's terms."""
    ranked = list(ranked)
    tokens = term_sets([texts[r.memory_id] for r in ranked])
    return [
        replace(
            r,
            breakdown=replace(
                r.breakdown,
                relevance=relevance(r.similarity, coverage(evidence.terms, held, evidence.idf)),
            ),
        )
        for r, held in zip(ranked, tokens, strict=True)
    ]


def similarities(evidence: Evidence) -> Callable[[int], float]:
    """Return memory_id -> its best cosine with the query's readings. A memory a reading's
    nearest vectors left out is at most as similar as the last one returned, which counts
    (an overestimate, the less so the more a search asks for); 0 without any vector."""
    best: dict[int, float] = {}
    floor = 0.0
    for seen in evidence.readings:
        if seen.hits:
            floor = max(floor, min(hit.similarity for hit in seen.hits))
        for hit in seen.hits:
            best[hit.memory_id] = max(best.get(hit.memory_id, -1.0), hit.similarity)
    return lambda memory_id: max(floor, best.get(memory_id, floor))


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
        if b.match <= 0 and b.score > ceiling:
            rest = b.score - settings.w_act * b.activation
            capped = capped_activation(b.activation, rest, ceiling, settings.w_act)
            breakdowns[mid] = _breakdown(rows[mid], parts[mid], capped, settings, now)


def _usable(rows: Mapping[int, SearchRow], filters: SearchFilters) -> dict[int, SearchRow]:
    if filters.empty:  # most searches: no need to ask each of a few hundred rows
        return dict(rows)
    return {mid: row for mid, row in rows.items() if filters.matches(row)}


def _reading_parts(evidence: Evidence, settings: RetrievalSettings) -> list[ReadingParts]:
    """Normalise each reading's evidence into parts (within the reading): every reading has
    words and meaning, so a best match weighs the same under each, times its weight."""
    found = []
    for index, seen in enumerate(evidence.readings):
        weight = seen.weight
        most_added = settings.w_session * max(seen.sessions.values(), default=0.0)
        most_added += settings.w_period if evidence.periods else 0.0
        found.append(
            ReadingParts(
                lexical=lexical_parts(seen.lexical, settings.lexical_exponent, seen.support),
                dense=dense_parts((hit.memory_id, hit.similarity) for hit in seen.hits),
                sessions=seen.sessions,
                weight=weight,
                most_added=weight * most_added,
                echoes=evidence.echoes if index else frozenset(),
            )
        )
    return found


def _candidates(pools: Iterable[Mapping[int, float]]) -> list[int]:
    """Return the ids of the pools in order, each once."""
    return list(dict.fromkeys(mid for pool in pools for mid in pool))


def _parts(
    row: SearchRow,
    evidence: Evidence,
    readings: Sequence[ReadingParts],
    settings: RetrievalSettings,
) -> Parts:
    """Score one memory's parts under the reading that gives it the most relevance (their
    weight applied to the lexical, dense and session parts). A memory that replaced others (an
    update that superseded a fact, a summary that merged fragments) scores in its own session
    or theirs, the better: it answers for what it replaced, where that was said."""
    period = period_part(row.event_time, evidence.periods) if evidence.periods else 0.0
    best: Parts | None = None
    for reading in readings:
        if row.content_hash in reading.echoes:
            continue
        session = session_part(row.session_id, reading.sessions)
        for replaced in row.replaced:
            session = max(session, session_part(replaced, reading.sessions))
        parts = Parts(
            lexical=reading.weight * reading.lexical.get(row.id, 0.0),
            dense=reading.weight * reading.dense.get(row.id, 0.0),
            session=reading.weight * session,
            period=period,
        )
        if best is None or match(parts, settings) > match(best, settings):
            best = parts
    assert best is not None  # the main reading has no echoes
    return best


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
        match=match(parts, settings),
        importance=importance_factor(
            row.base_importance, age, settings.half_life_days, pinned=row.pinned
        ),
        recency=recency_factor(age, settings.recency_half_life_days),
        activation=activation,
    )
    return Breakdown(
        relevance=0.0,
        match=terms.match,
        lexical=parts.lexical,
        dense=parts.dense,
        session=parts.session,
        period=parts.period,
        importance=terms.importance,
        recency=terms.recency,
        activation=activation,
        score=final_score(terms, settings),
    )
