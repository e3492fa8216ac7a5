"""Schema migrations: they build exactly the models, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from store.db import (
    HEAD_REVISION,
    check_schema,
    current_revision,
    describe_database_error,
    head_revision,
    make_engine,
    upgrade,
)
from store.errors import DatabaseUnavailable, SchemaError, StoreMissing, UnsupportedDatabase
from store.models import Base


def test_migrations_match_models(engine: Engine) -> None:
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    assert current_revision(engine) == head_revision() == HEAD_REVISION


def test_serving_a_store_does_not_import_alembic(tmp_path: object) -> None:
    # Alembic costs ~9 MB per process; only `db upgrade` and `init` need it.
    code = (
        "import sys; from secretary.config import Settings; from store.service import Store;"
        f"Store.open(Settings(data_dir={str(tmp_path)!r})).close();"
        "print('alembic' in sys.modules)"
    )
    upgrade(make_engine(f"sqlite:///{tmp_path}/secretary.db"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_upgrade_twice_is_harmless(engine: Engine) -> None:
    upgrade(engine)
    check_schema(engine)


def test_check_schema_missing_sqlite_file_says_init_and_creates_nothing(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/typo/secretary.db")
    with pytest.raises(StoreMissing, match=f"no store at {tmp_path}/typo: .*secretary init"):
        check_schema(engine)
    assert not (tmp_path / "typo").exists()


def test_check_schema_empty_database_says_init(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    with pytest.raises(StoreMissing, match="secretary init"):
        check_schema(make_engine(f"sqlite:///{tmp_path}/empty.db"))


def test_check_schema_older_schema_says_db_upgrade(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/old/secretary.db")
    upgrade(engine, "0002")  # creates the directory
    with pytest.raises(SchemaError, match="secretary db upgrade"):
        check_schema(engine)


def test_check_schema_unreachable_server_raises_database_unavailable() -> None:
    engine = make_engine("postgresql://u:secret@127.0.0.1:1/db")
    with pytest.raises(DatabaseUnavailable, match=r"reach PostgreSQL at 127\.0\.0\.1:1") as e:
        check_schema(engine)
    assert "secret" not in str(e.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "names 'mysql', not supported"),
        ("sqlite+aiosqlite:///x.db", "asks for driver 'aiosqlite'"),
        ("postgresql+psycopg2://u:pw@h/db", "asks for driver 'psycopg2'"),
        ("", "is not a database URL"),
    ],
)
def test_make_engine_refuses_databases_we_do_not_speak(url: str, message: str) -> None:
    with pytest.raises(UnsupportedDatabase, match=message) as raised:
        make_engine(url)
    assert "pw" not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db",
        "sqlite+pysqlite:///x.db",
        "postgresql://u@h/db",
        "postgresql+psycopg://h/d",
    ],
)
def test_make_engine_accepts_sqlite_and_postgresql(url: str) -> None:
    make_engine(url).dispose()


@pytest.mark.parametrize(
    ("detail", "says"),
    [
        ('FATAL:  role "bob" does not exist', "CREATE ROLE bob LOGIN"),
        ('FATAL:  database "mem" does not exist', "CREATE DATABASE mem OWNER bob"),
        ('FATAL:  password authentication failed for user "bob"', "wrong or missing password"),
        ("permission denied for schema public", "ALTER DATABASE mem OWNER TO bob"),
        ("connection failed: ... failed: Connection refused", "cannot reach PostgreSQL at h:5432"),
        ("something new", "PostgreSQL at h:5432 failed: something new"),
    ],
)
def test_describe_database_error_postgres_says_what_to_do(detail: str, says: str) -> None:
    message = describe_database_error(OperationalError("SELECT 1", {}, Exception(detail)), URL)
    assert says in message
    assert "pw" not in message


URL = "postgresql://bob:pw@h/mem"


def test_upgrade_to_0003_takes_retired_memories_out_of_the_timeline(tmp_path: object) -> None:
    # A chain a <-> archived <-> superseded <-> b <-> merged-but-linked, as 0002 stores left it.
    engine = make_engine(f"sqlite:///{tmp_path}/old.db")
    upgrade(engine, "0002")
    chain = [(1, "active"), (2, "archived"), (3, "superseded"), (4, "active"), (5, "merged")]
    with engine.begin() as connection:
        for position, (memory_id, status) in enumerate(chain):
            previous = chain[position - 1][0] if position else None
            following = chain[position + 1][0] if position + 1 < len(chain) else None
            connection.execute(
                text(
                    "INSERT INTO memories (id, namespace, content, content_hash, type, tags,"
                    " importance, base_importance, access_count, event_time, created_at,"
                    " updated_at, status, pinned, source, metadata, version, prev_id, next_id)"
                    " VALUES (:id, 'ns', 'x', 'h', 'event', '[]', 5, 5.0, 0,"
                    " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00',"
                    " :status, 0, 'api', '{}', 1, NULL, NULL)"
                ),
                {"id": memory_id, "status": status},
            )
        for position, (memory_id, _) in enumerate(chain):
            previous = chain[position - 1][0] if position else None
            following = chain[position + 1][0] if position + 1 < len(chain) else None
            connection.execute(
                text("UPDATE memories SET prev_id = :p, next_id = :n WHERE id = :id"),
                {"p": previous, "n": following, "id": memory_id},
            )

    upgrade(engine)

    with engine.connect() as connection:
        links = dict(
            (row[0], (row[1], row[2]))
            for row in connection.execute(text("SELECT id, prev_id, next_id FROM memories"))
        )
    engine.dispose()
    assert links == {1: (None, 4), 2: (None, None), 3: (None, None), 4: (1, None), 5: (None, None)}
