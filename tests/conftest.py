"""Shared fixtures: real backends, cheaply (SQLite in tmp_path, PostgreSQL on 127.0.0.1)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from store.database import Database
from store.db import checkpoint, make_engine, upgrade
from store.models import Base

pytest_plugins = ["tests.conftest_chroma"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
POSTGRES_URL = os.environ.get(
    "SECRETARY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session", autouse=True)
def _one_onnx_model_per_test_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stores opened in the test process share one offline embedder.

    Each fresh data directory would otherwise derive its own low-memory copy of the model (55 MB
    written and hashed) and load an onnxruntime session: about 0.4 s for every test that embeds.
    The embedder's own tests build theirs directly, and stores in subprocesses (the CLI, the
    daemon) still make their own.
    """
    import store.service
    from store.vector.embedder import Embedder, OnnxMiniLMEmbedder

    shared = OnnxMiniLMEmbedder(cache_dir=tmp_path_factory.mktemp("model-cache"))
    configured = store.service.make_embedder

    def make(**kwargs: Any) -> Embedder:
        made = configured(**kwargs)  # validates the settings as the service would
        return shared if isinstance(made, OnnxMiniLMEmbedder) else made

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store.service, "make_embedder", make)
        yield


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


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database migrated to head, once: tests copy the file (running the
    migrations takes ~0.1 s a database; test_migrations runs them for real)."""
    path = tmp_path_factory.mktemp("migrated") / "store.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    checkpoint(engine)  # everything in the main file: the copy takes only that
    engine.dispose()
    return path


def fresh_sqlite(migrated: Path, directory: Path) -> Engine:
    """An engine on a copy of the migrated, empty database in ``directory``."""
    path = directory / "store.db"
    shutil.copyfile(migrated, path)
    return make_engine(f"sqlite:///{path}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated, empty database: SQLite in tmp_path, or the shared PostgreSQL test database."""
    if request.param == "sqlite":
        sqlite = fresh_sqlite(request.getfixturevalue("migrated_sqlite"), tmp_path)
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
def sqlite_db(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Database]:
    """The store's reads and writer on SQLite only, for tests not about the database backend."""
    engine = fresh_sqlite(migrated_sqlite, tmp_path)
    yield Database(engine)
    engine.dispose()
