"""A database that fails under a read, as when an operator cuts the connections."""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError


def cut(engine: Engine) -> None:
    """Fail as a read does whose connection is cut: on PostgreSQL a connection of this engine
    terminated by ``pg_terminate_backend`` (the driver's own error; only this engine's own
    connection), on SQLite, which has no server, the error it raises for a database it lost."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            connection.execute(text("select pg_terminate_backend(pg_backend_pid())"))
    raise OperationalError("SELECT", {}, Exception("disk I/O error"))
