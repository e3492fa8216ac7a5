"""Logging through loguru to stderr (journald keeps it), optionally as JSON lines."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record


class _Intercept(logging.Handler):
    """Route the standard library's records (uvicorn, alembic, chromadb) into loguru."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def first_line(exc: BaseException) -> str:
    """The error's first line, what went wrong: SQLAlchemy adds the statement and a link after
    it, and notes before it (its ``detail``: "(raised as a result of Query-invoked autoflush;
    ...)" when a query's flush failed), which say nothing of the cause."""
    notes = {f"({note})" for note in getattr(exc, "detail", None) or ()}
    lines = [line for line in str(exc).strip().splitlines() if line.strip() not in notes]
    return next((line for line in lines if line.strip()), type(exc).__name__)


def error_line(exc: BaseException, *, full: bool = False) -> str:
    """A failure as a run's outcome says it: the error's kind and first line; ``full``: all of
    it (a record's error keeps the statement and parameters SQLAlchemy adds)."""
    return f"{type(exc).__name__}: {exc if full else first_line(exc)}"


class Outage:
    """The log of one thing that fails again and again while something is down (a loop that
    polls the database every half second): the first failure as a warning, the repeats at
    debug with a warning every ``every`` seconds saying how long and how often, and the
    recovery once. Each says the error's first line (SQLAlchemy adds the statement and a link).
    """

    def __init__(
        self, what: str, *, every: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.what = what
        self._every = every
        self._clock = clock
        self._failures = 0
        self._since = self._told = 0.0

    def failed(self, exc: BaseException) -> None:
        now = self._clock()
        self._failures += 1
        error = first_line(exc)
        if self._failures == 1:
            self._since = self._told = now
            logger.warning("{}: {}", self.what, error)
        elif now - self._told >= self._every:
            self._told = now
            logger.warning(
                "{} for {:.0f}s ({} failures so far): {}",
                self.what,
                now - self._since,
                self._failures,
                error,
            )
        else:
            logger.debug("{} (failure {}): {}", self.what, self._failures, error)

    def lasted(self) -> float:
        """Seconds since the first failure of this outage (0 while nothing fails)."""
        return self._clock() - self._since if self._failures else 0.0

    def ok(self) -> None:
        if self._failures:
            logger.info(
                "{}: works again after {} failures over {:.0f}s",
                self.what,
                self._failures,
                self._clock() - self._since,
            )
            self._failures = 0


# loguru's levels, least severe first (what --log-level accepts).
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")


def configure(level: str = "INFO", *, json: bool = False) -> None:
    """Send every log line to stderr at ``level``; ``json=True`` writes one JSON object a line.

    Tracebacks are written only at DEBUG (or TRACE); above it a logged exception adds its
    type and message to the line.
    """
    logger.remove()
    level = level.upper()
    stream = sys.stderr
    logger.add(
        _over_the_status_line(stream) if stream.isatty() and not json else stream,
        level=level,
        serialize=json,
        format=_format_with_traceback if level in {"DEBUG", "TRACE"} else _format_one_line,
        backtrace=False,
        diagnose=False,
    )
    logging.basicConfig(handlers=[_Intercept()], level=logging.WARNING, force=True)
    for noisy in ("chromadb", "httpx", "LiteLLM", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _over_the_status_line(stream: TextIO) -> Callable[[str], None]:
    """A terminal's sink: each line first clears the line it starts on, where a progress bar or
    status line (secretary.progress) may stand, so that the two do not run into each other;
    the bar is drawn again below at its next step."""

    def write(message: str) -> None:
        stream.write("\r\x1b[K" + message)
        stream.flush()

    return write


_LINE = "{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level:<7} {name}: {message}"


def _format_with_traceback(_record: Record) -> str:
    return _LINE + "\n{exception}"


def _format_one_line(record: Record) -> str:
    exception = record["exception"]
    if exception is None or exception.type is None:
        return _LINE + "\n"
    record["extra"]["_failure"] = f"{exception.type.__name__}: {exception.value}"
    return _LINE + " ({extra[_failure]})\n"
