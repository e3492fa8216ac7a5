"""Pure scoring of search candidates: relevance parts, decay, spreading activation, periods.

Nothing here does I/O or reads the clock; ``store.search.searcher`` gathers the values and
calls these.
The final score of a memory is

    w_sim * match + w_imp * (importance / 10) * exp(-lambda * age) + w_rec * recency
    + w_act * activation

Decay (lambda = ln 2 / half_life_days) and recency shape only their own terms; they never
multiply relevance: an old memory that answers the question must still be found (on LoCoMo,
relevance multiplied by a 90-day decay loses 37 points of recall@10).
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from store.neighbours import TIMELINE_WEIGHT
from store.settings import RetrievalSettings

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, kw_only=True)
class Parts:
    """The parts of the match, each in [0, 1] within its reading; a hit's parts are those of
    the reading that gave it its match, times that reading's weight."""

    lexical: float = 0.0  # (BM25 score / the query's best BM25 score) ** lexical_exponent
    dense: float = 0.0  # cosine of the memory's vector, scaled over the candidates
    session: float = 0.0  # the memory's session's BM25 score / the best session's
    period: float = 0.0  # 1 when the memory's time falls in a period the query names


@dataclass(frozen=True, kw_only=True)
class Terms:
    """The raw factors of the four terms of the final score (weights not applied)."""

    match: float
    importance: float
    recency: float
    activation: float


@dataclass(frozen=True, kw_only=True)
class Period:
    """A half-open UTC time range [start, end) named by a query."""

    start: datetime
    end: datetime

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Activation reaching a memory: its value and the anchor it came from."""

    value: float
    origin: int


# -- the terms ---------------------------------------------------------------------------------


def match(parts: Parts, settings: RetrievalSettings) -> float:
    """Return the weighted sum of the parts: how well a memory matches, for ranking within one
    query (its parts are normalised per query, so it means nothing across queries)."""
    return (
        settings.w_lexical * parts.lexical
        + settings.w_dense * parts.dense
        + settings.w_session * parts.session
        + settings.w_period * parts.period
    )


def final_score(terms: Terms, settings: RetrievalSettings) -> float:
    """Return the final score: each raw factor times its weight, summed."""
    return (
        settings.w_sim * terms.match
        + settings.w_imp * terms.importance
        + settings.w_rec * terms.recency
        + settings.w_act * terms.activation
    )


def age_days(now: datetime, event_time: datetime) -> float:
    """Return how many days before ``now`` the event was; a future event has age 0."""
    return max(0.0, (now - event_time).total_seconds() / SECONDS_PER_DAY)


def decay(age: float, half_life_days: float) -> float:
    """Return exp(-lambda * age) with lambda = ln 2 / half-life; half-life 0 means no decay."""
    if half_life_days <= 0:
        return 1.0
    return math.exp(-math.log(2) * max(0.0, age) / half_life_days)


def importance_factor(
    importance: float, age: float, half_life_days: float, *, pinned: bool = False
) -> float:
    """Return (importance / 10) * decay; a pinned memory keeps its importance undecayed."""
    level = min(10.0, max(0.0, importance)) / 10.0
    return level if pinned else level * decay(age, half_life_days)


def recency_factor(age: float, half_life_days: float) -> float:
    """Return 1 for a memory of ``now``, halving every ``half_life_days``."""
    return decay(age, half_life_days)


# -- relevance: a hit's evidence on an absolute scale -------------------------------------------

# The logistic model of `relevance` (see docs/retrieval.md#relevance): fitted on the tune
# halves of bench/relevance.py (LoCoMo conversations 0-4, FriendsQA's tune episodes) to tell a
# memory a question asks for from the other hits; the cosines are all-MiniLM-L6-v2's.
RELEVANCE_SIMILARITY = 4.6
RELEVANCE_COVERAGE = 5.0
RELEVANCE_BIAS = -3.5


def coverage(
    query_terms: Sequence[frozenset[str]],
    memory_terms: Iterable[str],
    idf: Mapping[str, float] | None = None,
) -> float:
    """Return the best share, over the query's term sets (a chat: its focus, the whole
    excerpt), of a set's terms that the memory holds, each term weighed by its ``idf`` (1 if
    not given): a name every memory holds says little, a word none holds says the memory is
    not about it. 0 for a query without terms."""
    held = set(memory_terms)
    weights: Mapping[str, float] = idf or {}
    best = 0.0
    for terms in query_terms:
        total = sum(weights.get(term, 1.0) for term in terms)
        if total > 0:
            best = max(best, sum(weights.get(term, 1.0) for term in terms & held) / total)
    return best


def relevance(similarity: float, covered: float) -> float:
    """Return how likely a memory is one the query asks for, in [0, 1], from evidence that
    depends little on the rest of the store: the cosine of its vector with the query's (the
    best over the readings) and the share of the query's terms it holds (`coverage`, each
    term weighed by its rarity in the namespace). A memory that holds every term of the
    query gets the same value in a store of 10 memories or of a million, others nearly so;
    so a threshold (``min_score``) can mean "nothing relevant"."""
    logit = RELEVANCE_SIMILARITY * similarity + RELEVANCE_COVERAGE * covered + RELEVANCE_BIAS
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))


# -- match parts -------------------------------------------------------------------------------


def lexical_parts(
    scores: Mapping[int, float], exponent: float, support: float = 1.0
) -> dict[int, float]:
    """Given memory_id -> BM25 score / the best score, return memory_id -> lexical part,
    (``support`` x that) ** ``exponent``.

    BM25 divided by the best is compressed: a memory sharing one or two of a question's words
    often scores half of the best, while the cosine is stretched over the candidates (see
    `dense_parts`). Raising it to ``exponent`` > 1 keeps the best at 1 and lowers partial
    matches, so the two parts add up on comparable scales. ``support`` (`lexical_support`)
    lowers them all when even the best matches hold little of the query.
    """
    if exponent == 1.0 and support == 1.0:
        return dict(scores)
    return {memory_id: (support * score) ** exponent for memory_id, score in scores.items()}


def lexical_support(covered: float, floor: float) -> float:
    """Return how far a reading's lexical evidence counts: 1 when its best matches hold at
    least ``floor`` of the query's terms (``covered``, `coverage`), (covered / floor) ** 2
    below; 1 when ``floor`` is 0 (off)."""
    if floor <= 0 or covered >= floor:
        return 1.0
    return (max(0.0, covered) / floor) ** 2


def dense_parts(hits: Iterable[tuple[int, float]]) -> dict[int, float]:
    """Given (memory_id, cosine) hits, nearest first, return memory_id -> dense part.

    The cosine is scaled like the lexical score, so that the parts add up on one scale: the
    best hit is 1 and the last similarity returned is 0 (a lone hit is 1). A memory that was
    not returned is at most as similar as the last one, so it counts 0. A memory returned
    twice keeps its best similarity.
    """
    best: dict[int, float] = {}
    floor = math.inf
    for memory_id, similarity in hits:
        best[memory_id] = max(similarity, best.get(memory_id, -math.inf))
        floor = min(floor, similarity)
    if not best:
        return {}
    top = max(best.values())
    if top - floor <= 1e-9:
        return dict.fromkeys(best, 1.0)
    return {memory_id: (value - floor) / (top - floor) for memory_id, value in best.items()}


def session_part(session_id: str | None, sessions: Mapping[str, float]) -> float:
    """Return the session's normalised score, 0 for a memory without a session."""
    return 0.0 if session_id is None else sessions.get(session_id, 0.0)


def period_part(moment: datetime, periods: Sequence[Period]) -> float:
    """Return 1.0 if ``moment`` falls in one of ``periods``, else 0.0."""
    return 1.0 if any(moment in period for period in periods) else 0.0


def worth_reading(
    known: Mapping[int, str],
    others: Iterable[int],
    readings: Sequence[ReadingParts],
    *,
    settings: RetrievalSettings,
) -> list[int]:
    """Return those of ``others`` that may still be among the ``settings.anchors`` most relevant.

    Under each reading a memory's relevance is at least its weighted lexical and dense parts
    (its base) and at most its base plus the most the reading's session and period parts can
    add; its relevance is the best over the readings. Once ``known`` memories (read, and
    usable: id -> content hash) hold ``anchors`` lower bounds of at least some value, a memory
    whose upper bound stays below that value cannot be an anchor: its row need not be read,
    and the anchors are the same. A reading gives an echo of it nothing (`ReadingParts`).
    """

    def lowest(memory_id: int) -> float:
        return max(
            reading.base(memory_id, settings)
            for reading in readings
            if known[memory_id] not in reading.echoes
        )

    def highest(memory_id: int) -> float:
        return max(reading.base(memory_id, settings) + reading.most_added for reading in readings)

    bounds = sorted((lowest(memory_id) for memory_id in known), reverse=True)
    if len(bounds) < settings.anchors:
        return list(others)
    floor = bounds[settings.anchors - 1] - 1e-9  # the margin absorbs rounding
    return [memory_id for memory_id in others if highest(memory_id) >= floor]


@dataclass(frozen=True, kw_only=True)
class ReadingParts:
    """What one reading of a query gives the memories: lexical and dense parts (normalised
    within the reading), session scores, and the weight of the relevance it gives."""

    lexical: Mapping[int, float]
    dense: Mapping[int, float]
    sessions: Mapping[str, float]
    weight: float = 1.0
    most_added: float = 0.0  # the most its session and period parts can add, weighted
    # Content hashes of memories this reading gives nothing: the turns a chat excerpt quotes,
    # for the reading of the excerpt as given (``store.search.query_shape.echoes_of``).
    echoes: frozenset[str] = frozenset()

    def base(self, memory_id: int, settings: RetrievalSettings) -> float:
        return self.weight * (
            settings.w_lexical * self.lexical.get(memory_id, 0.0)
            + settings.w_dense * self.dense.get(memory_id, 0.0)
        )


def top_ids(
    scores: Mapping[int, float], n: int, *, prefer: Container[int] = frozenset()
) -> list[int]:
    """Return the ``n`` best ids, best first; ties go to ``prefer``red ids, then the lower id,
    so order is stable."""
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0] not in prefer, item[0]))
    return [memory_id for memory_id, _ in ranked[: max(0, n)]]


K = TypeVar("K", int, str)


def mix_scores(parts: Sequence[tuple[Mapping[K, float], float]], k: int) -> dict[K, float]:
    """Return the ``k`` best keys by the weighted sum of their scores in ``parts`` (a key
    missing from a part scores 0 there), divided by the best sum, best first. One part of
    weight 1 comes back as it is."""
    if len(parts) == 1 and parts[0][1] == 1.0:
        return dict(parts[0][0])
    total: dict[K, float] = {}
    for scores, weight in parts:
        for key, score in scores.items():
            total[key] = total.get(key, 0.0) + weight * score
    ranked = sorted(total.items(), key=lambda item: -item[1])[: max(0, k)]
    best = ranked[0][1] if ranked else 0.0
    return {key: score / best for key, score in ranked if score > 0} if best > 0 else {}


# -- spreading activation ----------------------------------------------------------------------


def links_of(
    memory_id: int,
    timeline: Iterable[int],
    relations: Iterable[tuple[int, int, float]],
) -> list[tuple[int, float]]:
    """Return (neighbour, weight) of one memory: timeline first, then relations, strongest first.

    ``timeline`` are the prev/next neighbours it belongs together with (see `together`);
    ``relations`` are (source, target, strength) edges touching the memory in either
    direction; a neighbour reached twice keeps its strongest link.
    """
    best: dict[int, float] = {}
    for neighbour in timeline:
        best[neighbour] = TIMELINE_WEIGHT
    for source, target, strength in relations:
        neighbour = target if source == memory_id else source
        if neighbour != memory_id:
            best[neighbour] = max(best.get(neighbour, 0.0), min(1.0, max(0.0, strength)))
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def spread_step(
    frontier: Mapping[int, Spread],
    links: Mapping[int, Sequence[tuple[int, float]]],
    *,
    fanout: int,
) -> dict[int, Spread]:
    """Spread one hop: each frontier memory passes value * weight to its ``fanout`` best links.

    A memory reached several times keeps the best value (activation is the strongest
    association, not a count of them); activation never flows back to the anchor it came from.
    """
    reached: dict[int, Spread] = {}
    for memory_id, spread in frontier.items():
        for neighbour, weight in list(links.get(memory_id, ()))[: max(0, fanout)]:
            if neighbour == spread.origin:
                continue
            value = spread.value * weight
            current = reached.get(neighbour)
            if current is None or value > current.value:
                reached[neighbour] = Spread(value=value, origin=spread.origin)
    return reached


def attenuate(reached: Mapping[int, Spread], factor: float) -> dict[int, Spread]:
    """Return the frontier of the next hop: every value times ``factor``."""
    return {
        memory_id: Spread(value=spread.value * factor, origin=spread.origin)
        for memory_id, spread in reached.items()
    }


def merge_activation(activation: dict[int, float], reached: Mapping[int, Spread]) -> None:
    """Keep, per memory, the best activation seen over all hops (updates ``activation``)."""
    for memory_id, spread in reached.items():
        activation[memory_id] = max(activation.get(memory_id, 0.0), spread.value)


def capped_activation(activation: float, rest: float, ceiling: float, w_act: float) -> float:
    """Return the activation that keeps ``rest + w_act * activation`` at most ``ceiling``.

    For a memory with no relevance of its own (reached by spreading only): its score may
    not pass the lowest score of the anchors that have some, so association can add a
    memory but never push a memory that matches the query out of the results.
    """
    if w_act <= 0 or rest + w_act * activation <= ceiling:
        return activation
    return max(0.0, (ceiling - rest) / w_act)


# -- periods named in a query ------------------------------------------------------------------

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# Most specific first; each match blanks its span so "8 May 2023" is not also "May 2023".
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (unit, re.compile(pattern, re.IGNORECASE))
    for unit, pattern in (
        ("day", r"\b(?P<year>(?:19|20)\d\d)-(?P<month>\d\d)-(?P<day>\d\d)\b"),
        ("day", rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s*{_YEAR}\b"),
        ("day", rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b"),
        ("month", rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
        ("year", rf"\b{_YEAR}\b"),
        ("last_month_name", rf"\blast\s+{_MONTH}\b"),
        # A bare month only after a preposition: "May I ..." is not a period.
        ("month_name", rf"\b(?:in|during|this|since|early|mid|late|of)\s+{_MONTH}\b"),
        ("relative", r"\b(?P<rel>yesterday|today|(?:last|this)\s+(?:week|month|year))\b"),
    )
)


def parse_periods(query: str, now: datetime) -> tuple[Period, ...]:
    """Return the periods a query names: "on 8 May, 2023", "in May 2023", "2022", "last June".

    A month without a year is its latest occurrence up to ``now`` ("last June": before the
    current month); relative words ("yesterday", "last week", "this year") count from ``now``.
    Unparseable dates (31 February) are ignored.
    """
    now = now.astimezone(UTC)
    text = query
    found: list[Period] = []
    for unit, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            period = _period(unit, match, now)
            if period is not None and period not in found:
                found.append(period)
        text = pattern.sub(lambda m: " " * len(m.group()), text)
    return tuple(found)


def _period(unit: str, match: re.Match[str], now: datetime) -> Period | None:
    groups = match.groupdict()
    try:
        if unit == "day":
            month = _month_number(groups["month"])
            start = datetime(int(groups["year"]), month, int(groups["day"]), tzinfo=UTC)
            return Period(start=start, end=start + timedelta(days=1))
        if unit == "month":
            return _month_period(int(groups["year"]), _month_number(groups["month"]))
        if unit == "year":
            return _year_period(int(groups["year"]))
        if unit in ("month_name", "last_month_name"):
            return _latest_month(_month_number(groups["month"]), now, unit == "last_month_name")
        return _relative(" ".join(groups["rel"].lower().split()), now)
    except ValueError:  # 31 February, month 13
        return None


def _month_number(text: str) -> int:
    return int(text) if text.isdigit() else MONTHS[text.lower()]


def _month_period(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Period(start=start, end=end)


def _year_period(year: int) -> Period:
    return Period(start=datetime(year, 1, 1, tzinfo=UTC), end=datetime(year + 1, 1, 1, tzinfo=UTC))


def _latest_month(month: int, now: datetime, strictly_before: bool) -> Period:
    """Return the latest ``month`` that started by now (before the current month if strict)."""
    year = (
        now.year
        if month < now.month or (month == now.month and not strictly_before)
        else (now.year - 1)
    )
    return _month_period(year, month)


def _relative(phrase: str, now: datetime) -> Period:
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    week = today - timedelta(days=today.weekday())  # Monday
    month = _month_period(now.year, now.month)
    spans = {
        "today": (today, today + timedelta(days=1)),
        "yesterday": (today - timedelta(days=1), today),
        "this week": (week, week + timedelta(days=7)),
        "last week": (week - timedelta(days=7), week),
        "this month": (month.start, month.end),
        "last month": (_month_period(*_previous_month(now.year, now.month)).start, month.start),
        "this year": (_year_period(now.year).start, _year_period(now.year).end),
        "last year": (_year_period(now.year - 1).start, _year_period(now.year).start),
    }
    start, end = spans[phrase]
    return Period(start=start, end=end)


def _previous_month(year: int, month: int) -> tuple[int, int]:
    return (year - 1, 12) if month == 1 else (year, month - 1)
