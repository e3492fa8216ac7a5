"""What the benchmark packages share: paths, progress lines, git and version facts, settings.

Only the project's public API is used: settings through ``load_settings``, the schema through
``store.db.check_schema``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sqlalchemy import text

from secretary.config import Settings, load_settings
from store.db import check_schema, make_engine, upgrade
from store.errors import SchemaError

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work"  # caches and prepared stores (git-ignored)
RESULTS = ROOT / "bench" / "results"


def say(message: str) -> None:
    """Print a progress line with the time to stderr."""
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def git(*command: str) -> str:
    """Return the output of a git command in the checkout, or "" if it fails."""
    try:
        return subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def scratch_postgres(name: str) -> Iterator[str]:
    """Create the empty PostgreSQL database ``name`` (dropped first if left over) on the local
    server; yield its URL; drop it afterwards."""
    admin = make_engine(POSTGRES_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def write_results(
    out: Path, results: dict[str, Any], render: Callable[[dict[str, Any]], str]
) -> None:
    """Write ``results`` as JSON to ``out`` and as Markdown (``render``) beside it, and say so."""
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(results))
    say(f"wrote {out} and {out.with_suffix('.md')}")


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def settings_for(data_dir: Path, **index: Any) -> Settings:
    """Default settings for ``data_dir``, with ``index`` settings overridden.

    ``environ={}``: the shell's SECRETARY_* variables must not change what is measured.
    """
    settings = load_settings(None, {}, data_dir=data_dir)
    if index:
        settings = settings.model_copy(update={"index": settings.index.model_copy(update=index)})
    return settings


def schema_current(database: Path, *, upgrade_first: bool = False) -> bool:
    """Tell whether the SQLite file at ``database`` is at the newest migration.

    ``upgrade_first`` upgrades it before checking (a cached store from an older checkout is
    then kept); a missing file is not current.
    """
    if not database.exists():
        return False
    engine = make_engine(f"sqlite:///{database}")
    try:
        if upgrade_first:
            upgrade(engine)
        check_schema(engine)
    except SchemaError:
        return False
    finally:
        engine.dispose()
    return True
