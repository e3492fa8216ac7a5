"""How a rejection reads: each distinct problem once, with the lines that have it."""

from __future__ import annotations

from store.errors import ValidationFailed


def test_rejection_names_each_problem_once_with_its_lines_as_ranges() -> None:
    foreign = "a line of namespace 'a', not 'b'"
    problems = [(f"line {n}", foreign) for n in (1, 2, 3, 5, 7, 8)]
    problems.insert(2, ("line 9", "content: missing"))
    failed = ValidationFailed(problems)
    assert str(failed) == (
        "rejected, nothing written: lines 1-3, 5, 7-8: a line of namespace 'a', not 'b'; "
        "line 9: content: missing"
    )
    assert failed.problems == problems  # the API and --json still list every one


def test_rejection_of_places_other_than_lines_lists_them() -> None:
    failed = ValidationFailed([("since", "is after until"), ("until", "is after until")])
    assert str(failed) == "rejected, nothing written: since, until: is after until"


def test_rejection_of_many_problems_says_how_many_more() -> None:
    failed = ValidationFailed([(f"line {n}", f"problem {n}") for n in range(1, 31)])
    assert str(failed).endswith("line 20: problem 20 (and 10 more)")
    spread = ValidationFailed([(f"line {n}", "bad") for n in range(1, 40, 2)])
    assert str(spread) == (
        "rejected, nothing written: lines 1, 3, 5, 7, 9, 11, 13, 15, 17, 19 (and 10 more): bad"
    )
