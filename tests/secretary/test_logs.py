"""The log of a failure that repeats while something is down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger

from secretary.logs import Outage


@pytest.fixture
def lines() -> Iterator[list[str]]:
    said: list[str] = []
    sink = logger.add(lambda message: said.append(message.strip()), format="{level} {message}")
    yield said
    logger.remove(sink)


def test_an_outage_warns_once_then_every_minute_then_says_it_ended(lines: list[str]) -> None:
    now = [0.0]
    down = Outage("cannot claim work", every=60.0, clock=lambda: now[0])
    error = RuntimeError("(psycopg.OperationalError) connection refused\n[SQL: SELECT 1]")

    for _ in range(121):  # a poll every half second for a minute, then once more
        down.failed(error)
        now[0] += 0.5
    down.ok()
    down.ok()
    down.failed(error)

    warnings = [line for line in lines if line.startswith("WARNING")]
    assert warnings == [
        "WARNING cannot claim work: (psycopg.OperationalError) connection refused",
        "WARNING cannot claim work for 60s (121 failures so far): "
        "(psycopg.OperationalError) connection refused",
        "WARNING cannot claim work: (psycopg.OperationalError) connection refused",
    ]
    assert [line for line in lines if line.startswith("INFO")] == [
        "INFO cannot claim work: works again after 121 failures over 60s"
    ]
    assert sum(line.startswith("DEBUG") for line in lines) == 119
    assert not any("[SQL:" in line for line in lines)
