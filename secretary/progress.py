"""Progress for long commands: a bar on a terminal, a log line every few seconds otherwise;
and a status line that a terminal shows while a step runs (nothing elsewhere)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

import click
from loguru import logger


class Progress:
    """Count work done against an optional total; report it on stderr."""

    def __init__(self, label: str, total: int | None, *, every_seconds: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._every = every_seconds
        self._last = time.monotonic()
        self._started = self._last
        self._bar = (
            click.progressbar(length=total, label=label, file=sys.stderr)
            if total and sys.stderr.isatty()
            else None
        )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif exc is None and self.done:
            self._log()

    def advance(self, count: int) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)
            return
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            self._log()

    def _log(self) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        of = f"/{self.total}" if self.total else ""
        logger.info("{}: {}{} ({:.0f}/s)", self.label, self.done, of, self.done / elapsed)


@contextmanager
def progress(label: str, total: int | None = None) -> Iterator[Progress]:
    with Progress(label, total) as bar:
        yield bar


class StatusLine:
    """One line on stderr, rewritten in place, saying what runs now; only on a terminal (a pipe
    or a log gets the results alone). ``clear`` before printing a result line."""

    def __init__(self) -> None:
        self.shown = False
        self._tty = sys.stderr.isatty()

    def show(self, text: str) -> None:
        if self._tty:
            click.echo(f"\r\x1b[K{text}", err=True, nl=False)
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            click.echo("\r\x1b[K", err=True, nl=False)
            self.shown = False
