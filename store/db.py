"""Engines, sessions and schema migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from store.errors import SchemaError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration (a test keeps it equal to Alembic's head). Checking the schema against
# it needs no Alembic: importing Alembic costs every serving process ~9 MB of memory.
HEAD_REVISION = "0002"


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
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (idempotent)."""
    from alembic import command

    command.upgrade(_alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    """Return the revision Alembic recorded in the database; None for an empty database."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def head_revision() -> str | None:
    """Return the newest migration according to Alembic's scripts (see HEAD_REVISION)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def check_schema(engine: Engine) -> None:
    """Raise SchemaError unless the database is at the newest migration."""
    current = current_revision(engine)
    if current != HEAD_REVISION:
        raise SchemaError(current, HEAD_REVISION)
