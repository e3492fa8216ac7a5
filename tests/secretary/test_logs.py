"""The log of a failure that repeats while something is down."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pytest
from loguru import logger
from sqlalchemy.exc import OperationalError

from secretary.logs import Outage, configure
from secretary.progress import progress


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


def test_an_outage_says_the_cause_of_an_error_an_autoflush_raised(lines: list[str]) -> None:
    # SQLAlchemy puts a note before the cause of an error a query's autoflush raised: the log
    # said "cannot claim work, trying again: (raised as a result of Query-invoked autoflush; ...)".
    error = OperationalError("INSERT", {}, Exception("terminating connection"))
    error.add_detail(
        "raised as a result of Query-invoked autoflush; consider using a session.no_autoflush"
        " block if this flush is occurring prematurely"
    )

    Outage("cannot claim work, trying again").failed(error)

    assert lines == [
        "WARNING cannot claim work, trying again: (builtins.Exception) terminating connection"
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_a_log_line_clears_a_progress_bar_on_a_terminal_only(
    tty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        configure("INFO")
        with progress("ingesting", 10) as bar:
            bar.advance(3)
            logger.warning("the index is down")
            bar.advance(7)
    finally:
        logger.remove()
    text = stream.getvalue()
    line = next(part for part in text.split("\n") if "the index is down" in part)
    if tty:  # the bar's line is cleared before the log line is written over it
        assert "\r\x1b[K" in line
        assert line.rsplit("\r\x1b[K", 1)[1].split()[1] == "WARNING"
    else:  # a pipe or a file: the log line alone, from its first character
        assert "\x1b" not in text
        assert line.split()[1] == "WARNING"
