"""Engines, sessions and schema migrations."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from store.errors import DatabaseUnavailable, SchemaError, StoreMissing, UnsupportedDatabase

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

# What a store call raises when the database itself fails (unreachable, locked, full): callers
# outside the store catch this name and need not know which library speaks to the database.
DatabaseError = SQLAlchemyError

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration (a test keeps it equal to Alembic's head). Checking the schema against
# it needs no Alembic: importing Alembic costs every serving process ~9 MB of memory.
HEAD_REVISION = "0012"


CHUNK = 500  # ids per IN (...) clause; well below every backend's parameter limit


def chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    """Yield the distinct ids, sorted, in lists of at most CHUNK."""
    ordered = sorted(set(ids))
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Given a database URL, return an engine; SQLite gets WAL, foreign keys and a busy timeout.

    Connect to nothing and create nothing (``upgrade`` creates a SQLite file's directory).
    Raise UnsupportedDatabase unless the URL is SQLite or PostgreSQL.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(parsed, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.drivername == "postgresql":
        # psycopg 3 is our PostgreSQL driver; plain postgresql:// would look for psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, pool_pre_ping=True, **kwargs)


_DRIVERS = {"sqlite": ("", "pysqlite"), "postgresql": ("", "psycopg")}


def parse_url(url: str) -> URL:
    """Return the parsed URL. Raise UnsupportedDatabase if it is no URL, or not one we speak."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UnsupportedDatabase(url, "is not a database URL") from None
    backend = parsed.get_backend_name()
    if backend not in _DRIVERS:
        raise UnsupportedDatabase(_hide_password(parsed), f"names {backend!r}, not supported")
    driver = parsed.drivername.partition("+")[2]
    if driver not in _DRIVERS[backend]:
        raise UnsupportedDatabase(_hide_password(parsed), f"asks for driver {driver!r}")
    return parsed


def _hide_password(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def sqlite_file(url: str | URL) -> Path | None:
    """Return the file of a SQLite URL; None for another database or an in-memory one."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control from pysqlite so that writers can BEGIN IMMEDIATE (below).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Deleted and rewritten content is overwritten with zeros, not left in free pages: a forget
    # must leave no byte of what it erased in the file (see checkpoint()).
    cursor.execute("PRAGMA secure_delete=ON")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    # A writer that reads first and then upgrades its lock can fail at once with "database is
    # locked" under concurrency; taking the write lock up front makes it wait its turn instead.
    # Readers keep a plain BEGIN: in WAL mode they never block a writer.
    immediate = connection.get_execution_options().get("write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def checkpoint(engine: Engine) -> None:
    """Fold SQLite's write-ahead log into the database file and empty it (no-op elsewhere).

    Until then the log still holds the pages as they were before the last writes.
    """
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


@dataclass(frozen=True, kw_only=True)
class Compacted:
    """What ``compact`` did: the database's size before and after, in bytes, and what is left."""

    backend: str
    size_before: int | None
    size_after: int | None
    notes: tuple[str, ...] = ()


def compact(engine: Engine) -> Compacted:
    """Rewrite the database so that no byte of erased rows is left in its files.

    SQLite zeroes what it deletes (``secure_delete``) and a checkpoint empties its log, so this
    only checkpoints. PostgreSQL keeps deleted and updated row versions in the table files
    until they are rewritten: ``VACUUM FULL`` rewrites every table of the database, holding an
    exclusive lock on each while it does (searches and writes wait: a maintenance window), and a
    ``CHECKPOINT`` then lets the server recycle the write-ahead log that still holds the old
    rows. Raise DatabaseUnavailable if the database cannot be reached.
    """
    if engine.dialect.name == "sqlite":
        size = _sqlite_size(engine)
        checkpoint(engine)
        return Compacted(backend="sqlite", size_before=size, size_after=_sqlite_size(engine))
    notes: list[str] = []
    try:
        with engine.connect() as plain:
            autocommit = plain.execution_options(isolation_level="AUTOCOMMIT")
            before = autocommit.execute(text("SELECT pg_database_size(current_database())"))
            size_before = int(before.scalar_one())
            autocommit.exec_driver_sql("VACUUM FULL")
            try:
                autocommit.exec_driver_sql("CHECKPOINT")
            except SQLAlchemyError as exc:  # needs superuser or pg_checkpoint
                notes.append(f"CHECKPOINT refused ({_first_line(exc)}): the log is recycled later")
            after = autocommit.execute(text("SELECT pg_database_size(current_database())"))
            size_after = int(after.scalar_one())
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable(_first_line(exc)) from exc
    return Compacted(
        backend=engine.dialect.name,
        size_before=size_before,
        size_after=size_after,
        notes=tuple(notes),
    )


def _sqlite_size(engine: Engine) -> int | None:
    database = engine.url.database
    if not database or database == ":memory:":
        return None
    path = Path(database)
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _first_line(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]


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

    database = sqlite_file(engine.url)
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
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
    """Raise SchemaError unless the database is at the newest migration: StoreMissing if it
    holds no store (a SQLite file is never created here), DatabaseUnavailable if it cannot be
    reached or opened.
    """
    database = sqlite_file(engine.url)
    if database is not None and not database.exists():
        raise StoreMissing(str(database.parent))
    try:
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable(describe_database_error(exc, engine.url)) from exc
    if current is None:
        raise StoreMissing(str(database.parent) if database else _hide_password(engine.url))
    if current != HEAD_REVISION:
        raise SchemaError(current, HEAD_REVISION)


def describe_database_error(exc: BaseException, url: str | URL) -> str:
    """Given a database failure, return one or two lines saying what failed and what to do."""
    parsed = make_url(url)
    orig = getattr(exc, "orig", None) or exc
    detail = " ".join(str(orig).split())
    database = sqlite_file(parsed)
    if database is not None:
        return _describe_sqlite(detail, database)
    if parsed.get_backend_name() == "postgresql":
        return _describe_postgres(detail, parsed)
    return f"the database failed: {detail}"


def _describe_sqlite(detail: str, database: Path) -> str:
    where = f"the SQLite database {database}"
    if "unable to open" in detail and not database.parent.is_dir():
        return (
            f"cannot open {where}: the directory {database.parent} does not exist; "
            "`secretary init` creates it (or check --data-dir and database.url)"
        )
    if "unable to open" in detail or "readonly" in detail:
        return (
            f"cannot write {where} ({detail}): run as the user who owns {database.parent}, "
            "or choose another --data-dir"
        )
    if "locked" in detail:
        return f"{where} is locked by another process ({detail}): try again when it is done"
    if "not a database" in detail:
        return f"{database} is not a SQLite database: check --data-dir and database.url"
    return f"{where} failed: {detail}"


def _describe_postgres(detail: str, url: URL) -> str:
    server = f"{url.host or 'localhost'}:{url.port or 5432}"
    role, name = url.username or "(none)", url.database or "(none)"
    fix = "(database.url or SECRETARY_DATABASE_URL; see the README's PostgreSQL section)"
    if f'role "{role}" does not exist' in detail:
        return (
            f"PostgreSQL at {server} has no role {role!r}: create it, e.g. "
            f"sudo -u postgres psql -c \"CREATE ROLE {role} LOGIN PASSWORD '...'\" {fix}"
        )
    if f'database "{name}" does not exist' in detail:
        return (
            f"PostgreSQL at {server} has no database {name!r}: create it, e.g. "
            f'sudo -u postgres psql -c "CREATE DATABASE {name} OWNER {role}" {fix}'
        )
    if "password authentication failed" in detail or "no password supplied" in detail:
        return f"PostgreSQL at {server} refused role {role!r}: wrong or missing password {fix}"
    if "permission denied" in detail:
        return (
            f"role {role!r} lacks a privilege in database {name!r} ({detail}): make it the "
            f'owner, e.g. sudo -u postgres psql -c "ALTER DATABASE {name} OWNER TO {role}"'
        )
    for sign in _UNREACHABLE:
        if sign.lower() in detail.lower():
            return f"cannot reach PostgreSQL at {server} ({sign.lower()}): is it running? {fix}"
    return f"PostgreSQL at {server} failed: {detail}"


# What psycopg says when the server is not there, most telling first.
_UNREACHABLE = (
    "Connection refused",
    "timeout expired",
    "could not translate host name",
    "failed to resolve host",
    "Network is unreachable",
    "No route to host",
    "server closed the connection unexpectedly",
    "connection failed",
)
