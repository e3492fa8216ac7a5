"""Logging through loguru to stderr (journald keeps it), optionally as JSON lines."""

from __future__ import annotations

import logging
import sys

from loguru import logger


class _Intercept(logging.Handler):
    """Route the standard library's records (uvicorn, alembic, chromadb) into loguru."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def configure(level: str = "INFO", *, json: bool = False) -> None:
    """Send every log line to stderr at ``level``; ``json=True`` writes one JSON object a line."""
    logger.remove()
    logger.add(
        sys.stderr,
        level=level.upper(),
        serialize=json,
        format="{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level:<7} {name}: {message}",
        backtrace=False,
        diagnose=False,
    )
    logging.basicConfig(handlers=[_Intercept()], level=logging.WARNING, force=True)
    for noisy in ("chromadb", "httpx", "LiteLLM", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
