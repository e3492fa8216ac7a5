"""The console's session cookie and its CSRF tokens: pure functions over a secret.

A browser cannot send the API's key header, so the key is posted once to the login form and the
session cookie then names it by a fingerprint (never the key itself). The cookie is signed with
HMAC-SHA256 under a secret the console draws at start: a restart logs everyone out. Every form
carries a token that is an HMAC of the session's nonce, so another site cannot post one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

COOKIE = "secretary_console"
MAX_AGE = timedelta(hours=12)


@dataclass(frozen=True, kw_only=True)
class Session:
    """A browser's session: a random nonce, the key it logged in with (a fingerprint), since."""

    nonce: str
    key_id: str | None
    issued: datetime


def new_session(now: datetime, key_id: str | None = None) -> Session:
    return Session(nonce=secrets.token_hex(16), key_id=key_id, issued=now)


def fingerprint(key: str) -> str:
    """Given an API key, return the id a session names it by (the key cannot be read back)."""
    return hashlib.sha256(b"secretary-console-key:" + key.encode()).hexdigest()[:32]


def _sign(secret: bytes, payload: str) -> str:
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


def encode(secret: bytes, session: Session) -> str:
    """Given the secret and a session, return the cookie's value."""
    payload = f"{session.nonce}.{session.key_id or '-'}.{int(session.issued.timestamp())}"
    return f"{payload}.{_sign(secret, payload)}"


def decode(secret: bytes, value: str | None, now: datetime) -> Session | None:
    """Given the secret, a cookie's value and now, return its session; None if the value is
    missing, forged or older than MAX_AGE."""
    if not value or value.count(".") != 3:
        return None
    payload, _, signature = value.rpartition(".")
    if not hmac.compare_digest(_sign(secret, payload), signature):
        return None
    nonce, key_id, issued_text = payload.split(".")
    if not issued_text.isdigit():
        return None
    issued = datetime.fromtimestamp(int(issued_text), tz=UTC)
    if not -timedelta(minutes=5) <= now - issued <= MAX_AGE:
        return None
    return Session(nonce=nonce, key_id=None if key_id == "-" else key_id, issued=issued)


def csrf_token(secret: bytes, session: Session) -> str:
    """The token every form of this session carries."""
    return _sign(secret, "csrf:" + session.nonce)[:40]


def csrf_ok(secret: bytes, session: Session, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(csrf_token(secret, session), token)
