"""Alembic environment: the engine is handed in by ``store.db.upgrade``."""

from __future__ import annotations

from typing import Any

from alembic import context

from store.models import Base

engine = context.config.attributes["engine"]


def _sqlite_foreign_keys(connection: Any, *, on: bool) -> None:
    # Outside any transaction (SQLite ignores the pragma inside one), on the driver connection
    # so that SQLAlchemy does not BEGIN first.
    connection.connection.dbapi_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    # Batch mode recreates SQLite tables: dropping the old one with foreign keys on would
    # cascade to the rows that point at it. They are checked before the migration commits.
    if sqlite:
        _sqlite_foreign_keys(connection, on=False)
    try:
        with connection.begin():
            context.configure(
                connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite
            )
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
    finally:
        if sqlite:
            _sqlite_foreign_keys(connection, on=True)
