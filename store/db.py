"""Engines, sessions and schema migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from store.errors import SchemaError

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Given a database URL, return an engine; SQLite gets WAL, foreign keys and a busy timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        # psycopg 3 is our PostgreSQL driver; plain postgresql:// would look for psycopg2.
        url = str(parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    return create_engine(url, pool_pre_ping=True, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control from pysqlite so that writers can BEGIN IMMEDIATE (below).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    # A writer that reads first and then upgrades its lock can fail at once with "database is
    # locked" under concurrency; taking the write lock up front makes it wait its turn instead.
    # Readers keep a plain BEGIN: in WAL mode they never block a writer.
    immediate = connection.get_execution_options().get("write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def session_factory(engine: Engine, *, write: bool = False) -> sessionmaker[Session]:
    """Return a session factory; ``write=True`` sessions lock SQLite for writing at BEGIN."""
    bind = engine.execution_options(write=True) if write else engine
    return sessionmaker(bind, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Yield a session whose work commits on success and rolls back on any error."""
    with factory() as session, session.begin():
        yield session


def _alembic_config(engine: Engine) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (idempotent)."""
    command.upgrade(_alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def check_schema(engine: Engine) -> None:
    """Raise SchemaError unless the database is at the newest migration."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaError(current, head)
