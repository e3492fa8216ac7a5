"""Shared fixtures: real backends, cheaply (SQLite in tmp_path, PostgreSQL on 127.0.0.1)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from store.database import Database
from store.db import make_engine, upgrade
from store.models import Base

pytest_plugins = ["tests.conftest_chroma"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
POSTGRES_URL = os.environ.get(
    "SECRETARY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def _required(name: str) -> bool:
    return os.environ.get(name, "") == "1"


@pytest.fixture(scope="session")
def postgres_engine() -> Iterator[Engine]:
    """A throw-away database on the PostgreSQL server, migrated once per test session."""
    admin = make_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"secretary_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        message = f"PostgreSQL at {POSTGRES_URL} is not reachable: {exc.orig}"
        if _required("SECRETARY_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def truncate(engine: Engine) -> None:
    """Empty every table (ids start again at 1)."""
    tables = ", ".join(f'"{table.name}"' for table in Base.metadata.sorted_tables)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated, empty database: SQLite in tmp_path, or the shared PostgreSQL test database."""
    if request.param == "sqlite":
        sqlite = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        upgrade(sqlite)
        yield sqlite
        sqlite.dispose()
        return
    postgres: Engine = request.getfixturevalue("postgres_engine")
    truncate(postgres)
    yield postgres


@pytest.fixture
def db(engine: Engine) -> Database:
    """The store's reads and its writer over the parametrised database."""
    return Database(engine)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """The store's reads and writer on SQLite only, for tests not about the database backend."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    yield Database(engine)
    engine.dispose()
