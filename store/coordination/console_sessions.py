"""The console's logins: one row per session, so that every process serving the store agrees
on which are open, a restart keeps them, and logging out ends one for good.

A row is named by the hash of the session's token (the caller hashes it; the token itself is
only in the browser's cookie). A session is live while its row exists and has not expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, select

from store.db import session_factory, transaction
from store.models import ConsoleSession


@dataclass(frozen=True, kw_only=True)
class LiveSession:
    """A live session's row: the key it logged in with (a fingerprint), since, until."""

    key_id: str
    created_at: datetime
    expires_at: datetime


class ConsoleSessions:
    """Reads and writes ``console_sessions``."""

    def __init__(self, engine: Engine) -> None:
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def start(self, session_id: str, *, key_id: str, now: datetime, expires_at: datetime) -> None:
        """Store a new session. Expired ones are deleted with it: logins are rare, so the
        table stays as small as the sessions open."""
        with transaction(self._writes) as session:
            session.execute(delete(ConsoleSession).where(ConsoleSession.expires_at <= now))
            session.add(
                ConsoleSession(id=session_id, key_id=key_id, created_at=now, expires_at=expires_at)
            )

    def live(self, session_id: str, *, now: datetime) -> LiveSession | None:
        """Return the session named ``session_id``; None if it ended, expired or never was."""
        query = select(ConsoleSession).where(
            ConsoleSession.id == session_id, ConsoleSession.expires_at > now
        )
        with self._reads() as session:
            row = session.scalars(query).one_or_none()
            if row is None:
                return None
            return LiveSession(
                key_id=row.key_id, created_at=row.created_at, expires_at=row.expires_at
            )

    def end(self, session_id: str) -> None:
        """End the session named ``session_id`` (nothing if it is gone already)."""
        with transaction(self._writes) as session:
            session.execute(delete(ConsoleSession).where(ConsoleSession.id == session_id))
