"""`secretary db compact`: after a forget, no byte of the erased rows is left in the database's
own files (PostgreSQL's table files keep dead row versions until they are rewritten)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from secretary.config import Settings
from store.db import compact
from store.service import Store
from store.settings import DatabaseSettings
from store.write.forget import ForgetSelection
from tests.helpers.cli import cli_in
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 5, 1, tzinfo=UTC)
MARKER = "Zorvendal Quipsmark hid the ledger in the lighthouse"


def _table_files(engine: Engine) -> list[Path]:
    """Every file of every table, index and TOAST relation of the database (segments too)."""
    with engine.connect() as connection:
        connection.execute(text("CHECKPOINT"))  # what is in shared buffers reaches the files
        root = Path(connection.execute(text("SHOW data_directory")).scalar_one())
        relations = connection.execute(
            text(
                "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname IN ('public', 'pg_toast') AND c.relkind IN ('r', 'i', 't') "
                "AND pg_relation_filepath(c.oid) IS NOT NULL"
            )
        ).scalars()
        paths = [root / relation for relation in relations]
    return [segment for path in paths for segment in [path, *path.parent.glob(f"{path.name}.*")]]


def _holding(files: list[Path], needle: bytes) -> list[Path]:
    return [path for path in files if path.is_file() and needle in path.read_bytes()]


@pytest.fixture
def pg_store(postgres_engine: Engine, tmp_path: Path) -> Iterator[Store]:
    from tests.conftest import truncate

    truncate(postgres_engine)
    url = postgres_engine.url.render_as_string(hide_password=False)
    settings = Settings(data_dir=tmp_path, database=DatabaseSettings(url=url))
    store = Store.open(settings, embedder=FakeEmbedder())
    yield store
    store.close()


@pytest.mark.postgres
def test_compact_leaves_no_byte_of_a_forgotten_memory_in_the_table_files(
    pg_store: Store, postgres_engine: Engine
) -> None:
    try:
        files = _table_files(postgres_engine)
        files[0].read_bytes()
    except PermissionError:
        pytest.skip("the PostgreSQL data directory is not readable by this user")
    added = pg_store.add_memories(
        "ns",
        [{"content": MARKER, "tags": ["Zorvendal"], "timestamp": NOW.isoformat()}]
        + [
            {"content": f"an ordinary day, number {n}", "timestamp": NOW.isoformat()}
            for n in range(50)
        ],
        now=NOW,
    )
    pg_store.forget("ns", ForgetSelection(ids=(added.ids[0],)), now=NOW, by="test")

    # Forgotten, yet the dead row versions are still in the files: what compact is for.
    assert _holding(_table_files(postgres_engine), b"Zorvendal") != []

    done = compact(postgres_engine)

    assert _holding(_table_files(postgres_engine), b"Zorvendal") == []
    assert done.backend == "postgresql"
    assert done.size_before is not None
    assert done.size_after is not None
    assert pg_store.db.memories.count("ns") == 50  # the rest is untouched


def test_compact_on_sqlite_empties_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = cli_in(tmp_path, monkeypatch)
    run("init")

    result = run("db", "compact")

    assert "compacted the sqlite database" in result.output
    wal = tmp_path / "secretary.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0


@pytest.mark.postgres
def test_db_compact_asks_before_locking_postgres_and_a_script_must_say_yes(
    pg_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRETARY_DATABASE_URL", pg_store.settings.database_url)
    run = cli_in(tmp_path, monkeypatch)

    refused = run("db", "compact", code=1)  # no terminal: a script must say --yes
    done = run("db", "compact", "--yes")

    assert "refusing to compact without --yes (nothing done)" in refused.output
    assert "compacted the postgresql database" in done.output


@pytest.mark.postgres
def test_forget_compact_leaves_no_byte_in_the_table_files(
    pg_store: Store, postgres_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        _table_files(postgres_engine)[0].read_bytes()
    except PermissionError:
        pytest.skip("the PostgreSQL data directory is not readable by this user")
    added = pg_store.add_memories(
        "ns", [{"content": MARKER, "timestamp": NOW.isoformat()}], now=NOW
    )
    monkeypatch.setenv("SECRETARY_DATABASE_URL", pg_store.settings.database_url)
    run = cli_in(tmp_path, monkeypatch)

    result = run("forget", str(added.ids[0]), "-n", "ns", "--yes", "--compact")

    assert "compacted the postgresql database" in result.output
    assert _holding(_table_files(postgres_engine), b"Zorvendal") == []
