"""Tests of the pure scoring functions of search (store.search.scoring)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.neighbours import together
from store.search.scoring import (
    Parts,
    Period,
    Spread,
    Terms,
    age_days,
    attenuate,
    capped_activation,
    coverage,
    decay,
    dense_parts,
    final_score,
    importance_factor,
    lexical_parts,
    links_of,
    match,
    merge_activation,
    parse_periods,
    period_part,
    recency_factor,
    relevance,
    session_part,
    spread_step,
    top_ids,
)
from store.settings import RetrievalSettings

NOW = datetime(2023, 10, 20, 12, 0, tzinfo=UTC)
SETTINGS = RetrievalSettings(
    w_sim=1.0, w_imp=0.2, w_rec=0.1, w_act=0.4,
    w_lexical=1.0, w_dense=0.5, w_session=0.3, w_period=0.2,
)  # fmt: skip
unit = st.floats(min_value=0.0, max_value=1.0)


def _day(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


# -- the score ---------------------------------------------------------------------------------


def test_match_parts_weighted_sum() -> None:
    parts = Parts(lexical=1.0, dense=0.6, session=0.5, period=1.0)
    assert match(parts, SETTINGS) == pytest.approx(1.0 + 0.3 + 0.15 + 0.2)


def test_coverage_is_the_best_share_of_a_term_set_held() -> None:
    focus, whole = frozenset({"porto", "10k", "time"}), frozenset({"porto", "run", "time", "x"})
    assert coverage([focus], ["time", "porto", "other"]) == pytest.approx(2 / 3)
    assert coverage([focus, whole], ["run", "time", "porto", "x"]) == 1.0
    assert coverage([frozenset()], ["a"]) == 0.0
    assert coverage([], ["a"]) == 0.0


@given(similarity=st.floats(-1, 1), covered=st.floats(0, 1))
def test_relevance_in_unit_interval_and_rising_with_evidence(
    similarity: float, covered: float
) -> None:
    value = relevance(similarity, covered)
    assert 0.0 <= value <= 1.0
    assert relevance(min(1.0, similarity + 0.1), covered) >= value
    assert relevance(similarity, min(1.0, covered + 0.1)) >= value


def test_final_score_terms_documented_formula() -> None:
    terms = Terms(match=1.5, importance=0.5, recency=0.25, activation=0.8)
    assert final_score(terms, SETTINGS) == pytest.approx(1.5 + 0.2 * 0.5 + 0.1 * 0.25 + 0.4 * 0.8)


@given(relevance_=st.floats(0, 5), importance=st.floats(0, 10), age=st.floats(0, 1e5))
def test_final_score_any_age_relevance_term_undecayed(
    relevance_: float, importance: float, age: float
) -> None:
    imp = importance_factor(importance, age, SETTINGS.half_life_days)
    rec = recency_factor(age, SETTINGS.recency_half_life_days)
    score = final_score(
        Terms(match=relevance_, importance=imp, recency=rec, activation=0.0), SETTINGS
    )
    assert score - SETTINGS.w_imp * imp - SETTINGS.w_rec * rec == pytest.approx(
        SETTINGS.w_sim * relevance_, abs=1e-9
    )


def test_final_score_decades_old_relevant_memory_beats_fresh_irrelevant() -> None:
    def score(relevance_: float, age: float) -> float:
        terms = Terms(
            match=relevance_,
            importance=importance_factor(5, age, 90),
            recency=recency_factor(age, 30),
            activation=0.0,
        )
        return final_score(terms, RetrievalSettings())

    assert score(1.0, 365 * 30) > score(0.5, 0.0)


def test_decay_half_life_zero_disables_decay() -> None:
    assert decay(10_000.0, 0.0) == 1.0
    assert importance_factor(8, 10_000.0, 0.0) == pytest.approx(0.8)


def test_decay_one_half_life_halves() -> None:
    assert decay(90.0, 90.0) == pytest.approx(0.5)
    assert decay(0.0, 90.0) == 1.0


def test_importance_factor_pinned_memory_not_decayed() -> None:
    assert importance_factor(6, 900.0, 90.0, pinned=True) == pytest.approx(0.6)
    assert importance_factor(6, 900.0, 90.0) == pytest.approx(0.6 / 1024)


def test_importance_factor_out_of_range_clamped() -> None:
    assert importance_factor(12.0, 0.0, 90.0) == 1.0
    assert importance_factor(-1.0, 0.0, 90.0) == 0.0


def test_age_days_future_event_is_zero() -> None:
    assert age_days(NOW, NOW + timedelta(days=3)) == 0.0
    assert age_days(NOW, NOW - timedelta(hours=36)) == pytest.approx(1.5)


def test_recency_factor_one_half_life_halves() -> None:
    assert recency_factor(30.0, 30.0) == pytest.approx(0.5)


# -- relevance parts ---------------------------------------------------------------------------


def test_dense_parts_scaled_between_last_and_best() -> None:
    parts = dense_parts([(1, 0.9), (2, 0.6), (3, 0.3)])
    assert parts == pytest.approx({1: 1.0, 2: 0.5, 3: 0.0})


def test_dense_parts_repeated_memory_keeps_best_similarity() -> None:
    assert dense_parts([(1, 0.9), (2, 0.5), (1, 0.4)]) == pytest.approx({1: 1.0, 2: 0.2})


def test_lexical_parts_keep_the_best_at_one_and_lower_partial_matches() -> None:
    scores = {1: 1.0, 2: 0.5, 3: 0.0}
    assert lexical_parts(scores, 1.5) == pytest.approx({1: 1.0, 2: 0.5**1.5, 3: 0.0})
    assert lexical_parts(scores, 1.0) == scores
    assert lexical_parts({}, 2.0) == {}


def test_dense_parts_lone_or_equal_hits_are_best_and_empty_is_empty() -> None:
    assert dense_parts([(7, 0.42)]) == {7: 1.0}
    assert dense_parts([(7, 0.42), (8, 0.42)]) == {7: 1.0, 8: 1.0}
    assert dense_parts([]) == {}


def test_session_part_no_session_or_unscored_is_zero() -> None:
    sessions = {"s1": 1.0, "s2": 0.4}
    assert session_part("s2", sessions) == 0.4
    assert session_part("s9", sessions) == 0.0
    assert session_part(None, sessions) == 0.0


def test_period_part_inside_half_open_period_only() -> None:
    may = Period(start=_day(2023, 5, 1), end=_day(2023, 6, 1))
    assert period_part(_day(2023, 5, 31), [may]) == 1.0
    assert period_part(_day(2023, 6, 1), [may]) == 0.0
    assert period_part(_day(2023, 5, 2), []) == 0.0


def test_top_ids_equal_scores_lower_id_first() -> None:
    assert top_ids({5: 0.5, 3: 0.9, 4: 0.5, 1: 0.1}, 3) == [3, 4, 5]


# -- spreading activation ----------------------------------------------------------------------


def test_links_of_timeline_first_then_relations_by_strength() -> None:
    links = links_of(10, [9, 11], [(10, 20, 0.3), (30, 10, 0.8), (10, 9, 0.5)])
    assert links == [(9, 1.0), (11, 1.0), (30, 0.8), (20, 0.3)]


def test_links_of_timeline_neighbour_left_out_still_reached_by_its_relation() -> None:
    assert links_of(10, [], [(10, 9, 0.5)]) == [(9, 0.5)]


T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("session", "other_session", "apart", "expected"),
    [
        ("s1", "s1", timedelta(days=30), True),  # one session, however long
        ("s1", "s2", timedelta(minutes=1), False),  # a session boundary stops it
        (None, None, timedelta(minutes=59), True),  # close in time
        (None, None, timedelta(minutes=61), False),  # diary entries days apart
        ("s1", None, timedelta(minutes=5), True),  # one without a session: by time
        ("s1", None, timedelta(days=2), False),
    ],
)
def test_together_same_session_or_close_in_time(
    session: str | None, other_session: str | None, apart: timedelta, expected: bool
) -> None:
    assert together(session, T0, other_session, T0 + apart, 60.0) is expected
    assert together(other_session, T0 + apart, session, T0, 60.0) is expected  # symmetric


def test_together_zero_window_only_simultaneous_without_sessions() -> None:
    assert together(None, T0, None, T0, 0.0)
    assert not together(None, T0, None, T0 + timedelta(seconds=1), 0.0)


def test_capped_activation_keeps_score_at_most_the_ceiling() -> None:
    w_act = 0.5
    capped = capped_activation(2.0, rest=0.4, ceiling=1.0, w_act=w_act)
    assert capped == pytest.approx(1.2)
    assert 0.4 + w_act * capped == pytest.approx(1.0)
    assert capped_activation(0.5, rest=0.4, ceiling=1.0, w_act=w_act) == 0.5  # under: unchanged
    assert capped_activation(2.0, rest=1.5, ceiling=1.0, w_act=w_act) == 0.0  # never negative
    assert capped_activation(2.0, rest=0.4, ceiling=1.0, w_act=0.0) == 2.0


def test_top_ids_equal_scores_preferred_first() -> None:
    assert top_ids({5: 0.5, 3: 0.5, 4: 0.5}, 2, prefer={5}) == [5, 3]


def test_spread_step_fanout_bounds_neighbours_per_memory() -> None:
    links = {1: [(2, 1.0), (3, 0.9), (4, 0.8), (5, 0.7)]}
    reached = spread_step({1: Spread(value=2.0, origin=1)}, links, fanout=2)
    assert reached == {2: Spread(value=2.0, origin=1), 3: Spread(value=1.8, origin=1)}


def test_spread_step_zero_fanout_reaches_nothing() -> None:
    assert spread_step({1: Spread(value=1.0, origin=1)}, {1: [(2, 1.0)]}, fanout=0) == {}


def test_spread_step_shared_neighbour_keeps_best_value() -> None:
    frontier = {1: Spread(value=0.5, origin=1), 3: Spread(value=0.9, origin=3)}
    reached = spread_step(frontier, {1: [(2, 1.0)], 3: [(2, 1.0)]}, fanout=5)
    assert reached == {2: Spread(value=0.9, origin=3)}


def test_spread_step_second_hop_never_returns_to_origin() -> None:
    first = spread_step({1: Spread(value=1.0, origin=1)}, {1: [(2, 1.0)]}, fanout=5)
    second = spread_step(attenuate(first, 0.5), {2: [(1, 1.0), (3, 1.0)]}, fanout=5)
    assert second == {3: Spread(value=0.5, origin=1)}


def test_merge_activation_keeps_best_over_hops() -> None:
    activation = {2: 0.7}
    merge_activation(activation, {2: Spread(value=0.4, origin=1), 3: Spread(value=0.2, origin=1)})
    assert activation == {2: 0.7, 3: 0.2}


# -- periods -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Calvin open in May 2023?", [(_day(2023, 5, 1), _day(2023, 6, 1))]),
        ("What did Sam make on 18 August, 2023?", [(_day(2023, 8, 18), _day(2023, 8, 19))]),
        ("What was Sam doing on December 4, 2023?", [(_day(2023, 12, 4), _day(2023, 12, 5))]),
        ("Which movie on 8th December, 2023?", [(_day(2023, 12, 8), _day(2023, 12, 9))]),
        ("the forest picture of December 1,2023", [(_day(2023, 12, 1), _day(2023, 12, 2))]),
        ("notes from 2023-02-07", [(_day(2023, 2, 7), _day(2023, 2, 8))]),
        ("Which country did they visit in 2010?", [(_day(2010, 1, 1), _day(2011, 1, 1))]),
        ("What did Melanie do in May?", [(_day(2023, 5, 1), _day(2023, 6, 1))]),
        ("the party in December", [(_day(2022, 12, 1), _day(2023, 1, 1))]),
        ("What happened last October?", [(_day(2022, 10, 1), _day(2022, 11, 1))]),
        ("what did I say yesterday", [(_day(2023, 10, 19), _day(2023, 10, 20))]),
        ("anything last year", [(_day(2022, 1, 1), _day(2023, 1, 1))]),
        ("what came up last month", [(_day(2023, 9, 1), _day(2023, 10, 1))]),
        ("plans this week", [(_day(2023, 10, 16), _day(2023, 10, 23))]),
    ],
)
def test_parse_periods_named_period_parsed(
    query: str, expected: list[tuple[datetime, datetime]]
) -> None:
    assert [(p.start, p.end) for p in parse_periods(query, NOW)] == expected


def test_parse_periods_two_periods_both_returned_once() -> None:
    periods = parse_periods("in 2022 or in May 2023, or May 2023 again", NOW)
    assert [(p.start.year, p.end.year) for p in periods] == [(2023, 2023), (2022, 2023)]


@pytest.mark.parametrize(
    "query", ["May I ask what her hobbies are?", "what is his favourite dish", "3 kids at 2 pm"]
)
def test_parse_periods_no_period_named_empty(query: str) -> None:
    assert parse_periods(query, NOW) == ()


def test_parse_periods_impossible_date_ignored() -> None:
    assert parse_periods("on 31 February, 2023", NOW) == ()


def test_parse_periods_last_month_name_in_january_previous_year() -> None:
    periods = parse_periods("last January", _day(2024, 1, 15))
    assert periods == (Period(start=_day(2023, 1, 1), end=_day(2023, 2, 1)),)


def test_parse_periods_non_utc_now_counts_days_in_utc() -> None:
    # 01:00 on the 21st at UTC+2 is still the 20th in UTC.
    now = datetime(2023, 10, 21, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    assert parse_periods("yesterday", now)[0].start == _day(2023, 10, 19)


def test_the_relevance_model_documented_is_the_one_used() -> None:
    from pathlib import Path

    from store.search import scoring

    docs = (Path(__file__).resolve().parents[3] / "docs" / "retrieval.md").read_text()
    formula = (
        f"exp(-({scoring.RELEVANCE_SIMILARITY} · cosine + {scoring.RELEVANCE_COVERAGE} · "
        f"coverage - {-scoring.RELEVANCE_BIAS}))"
    )
    assert formula in docs
