"""The console's session cookie and its CSRF tokens: pure functions.

A browser cannot send the API's key header, so the key is posted once to the login form. The
login then gets a random token (its nonce), which the cookie carries and nothing else does: the
server keeps only the token's hash, in SQL (``store.coordination.console_sessions``), so every
process serving the store agrees, a restart keeps it, and logging out deletes it. Before login
(and in a console without keys) a session is anonymous: its nonce rides in a cookie signed with
HMAC-SHA256 under a secret the console draws at start, so it cannot be forged, nor planted by
another site.

The nonce is the session's secret: every form carries a token that is an HMAC under it, so
another site cannot post one, and a session that ended takes its tokens with it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

COOKIE = "secretary_console"
MAX_AGE = timedelta(hours=12)
LOGGED_IN = "k."  # a logged-in session's cookie: this, then its nonce (no signature: SQL decides)
_NONCE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32): 256 random bits


@dataclass(frozen=True, kw_only=True)
class Session:
    """A browser's session: a random nonce, the key it logged in with (a fingerprint; None
    before login), since."""

    nonce: str
    key_id: str | None
    issued: datetime


def new_session(now: datetime, key_id: str | None = None) -> Session:
    """A new session: anonymous, or logged in with the key of fingerprint ``key_id`` (which
    must then be stored under ``session_id`` to be valid)."""
    return Session(nonce=secrets.token_urlsafe(32), key_id=key_id, issued=now)


def fingerprint(key: str) -> str:
    """Given an API key, return the id a session names it by (the key cannot be read back)."""
    return hashlib.sha256(b"secretary-console-key:" + key.encode()).hexdigest()[:32]


def session_id(nonce: str) -> str:
    """Given a logged-in session's nonce, return the id its row is stored under (a hash: the
    table holds nothing a browser could present)."""
    return hashlib.sha256(b"secretary-console-session:" + nonce.encode()).hexdigest()


def _sign(secret: bytes, payload: str) -> str:
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


def encode(secret: bytes, session: Session) -> str:
    """Given the secret and a session, return the cookie's value."""
    if session.key_id is not None:
        return LOGGED_IN + session.nonce
    payload = f"{session.nonce}.{int(session.issued.timestamp())}"
    return f"{payload}.{_sign(secret, payload)}"


def logged_in_nonce(value: str | None) -> str | None:
    """Given a cookie's value, return the nonce it names if it is a logged-in session's; whether
    that session is live is for its row to say."""
    if value is None or not value.startswith(LOGGED_IN):
        return None
    nonce = value[len(LOGGED_IN) :]
    return nonce if _NONCE.fullmatch(nonce) else None


def decode(secret: bytes, value: str | None, now: datetime) -> Session | None:
    """Given the secret, a cookie's value and now, return its anonymous session; None if the
    value is missing, forged, older than MAX_AGE or a logged-in session's."""
    if not value or value.count(".") != 2:
        return None
    payload, _, signature = value.rpartition(".")
    if not hmac.compare_digest(_sign(secret, payload), signature):
        return None
    nonce, issued_text = payload.split(".")
    if not issued_text.isdigit():
        return None
    issued = datetime.fromtimestamp(int(issued_text), tz=UTC)
    if not -timedelta(minutes=5) <= now - issued <= MAX_AGE:
        return None
    return Session(nonce=nonce, key_id=None, issued=issued)


def _under_nonce(session: Session, message: str) -> str:
    return hmac.new(session.nonce.encode(), message.encode(), hashlib.sha256).hexdigest()


def csrf_token(session: Session) -> str:
    """The token every form of this session carries."""
    return _under_nonce(session, "csrf")[:40]


def csrf_ok(session: Session, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(csrf_token(session), token)


def seal(session: Session, message: str) -> str:
    """Given a message a page will show, return its seal for this session."""
    return _under_nonce(session, "said:" + message)[:32]
