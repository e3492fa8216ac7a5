"""The console's sessions: the cookie and CSRF tokens (pure functions), the table of logins on
SQLite and PostgreSQL, and the migration that adds it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, text

from store.api.console.session import (
    LOGGED_IN,
    MAX_AGE,
    csrf_ok,
    csrf_token,
    decode,
    encode,
    fingerprint,
    logged_in_nonce,
    new_session,
    seal,
    session_id,
)
from store.database import Database
from store.db import current_revision, make_engine, upgrade

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
SECRET = b"s" * 32
KEY_ID = fingerprint("key-a-0123456789")


def test_session_anonymous_round_trips_through_its_signed_cookie() -> None:
    session = new_session(NOW)
    assert decode(SECRET, encode(SECRET, session), NOW + timedelta(hours=1)) == session


def test_session_anonymous_tampered_other_secret_or_expired_is_none() -> None:
    value = encode(SECRET, new_session(NOW))
    nonce, issued, signature = value.split(".")
    assert decode(SECRET, f"{nonce}.{int(issued) + 60}.{signature}", NOW) is None
    assert decode(b"t" * 32, value, NOW) is None
    assert decode(SECRET, value, NOW + MAX_AGE + timedelta(seconds=1)) is None
    assert decode(SECRET, "garbage", NOW) is None
    assert decode(SECRET, None, NOW) is None


def test_session_logged_in_cookie_is_its_nonce_only() -> None:
    session = new_session(NOW, KEY_ID)
    value = encode(SECRET, session)
    assert value == LOGGED_IN + session.nonce
    assert "key-a" not in value
    assert KEY_ID not in value
    assert logged_in_nonce(value) == session.nonce
    # Not an anonymous cookie either: only its row makes it a session.
    assert decode(SECRET, value, NOW) is None


def test_session_logged_in_nonce_of_malformed_or_anonymous_cookies_is_none() -> None:
    nonce = new_session(NOW, KEY_ID).nonce
    for value in (None, "", LOGGED_IN, LOGGED_IN + nonce[:-1], LOGGED_IN + nonce + ".x"):
        assert logged_in_nonce(value) is None, value
    assert logged_in_nonce(encode(SECRET, new_session(NOW))) is None


def test_session_id_is_a_hash_of_the_nonce() -> None:
    nonce = new_session(NOW, KEY_ID).nonce
    assert session_id(nonce) == session_id(nonce)
    assert nonce not in session_id(nonce)
    assert len(session_id(nonce)) == 64
    assert session_id(nonce) != session_id(new_session(NOW, KEY_ID).nonce)


def test_csrf_token_and_seal_are_bound_to_their_session() -> None:
    one, two = new_session(NOW), new_session(NOW, KEY_ID)
    assert csrf_ok(one, csrf_token(one))
    assert csrf_ok(two, csrf_token(two))
    assert not csrf_ok(two, csrf_token(one))
    assert not csrf_ok(one, None)
    assert not csrf_ok(one, "")
    assert seal(one, "saved") != seal(two, "saved")
    assert seal(one, "saved") != seal(one, "deleted")


def test_console_sessions_live_until_ended(db: Database) -> None:
    sessions = db.console_sessions
    one, two = session_id("one"), session_id("two")
    for name in (one, two):
        sessions.start(name, key_id=KEY_ID, now=NOW, expires_at=NOW + MAX_AGE)
    sessions.end(one)
    sessions.end(one)  # twice: nothing more
    found = sessions.live(two, now=NOW)
    assert sessions.live(one, now=NOW) is None
    assert found is not None
    assert (found.key_id, found.created_at, found.expires_at) == (KEY_ID, NOW, NOW + MAX_AGE)
    assert sessions.live(session_id("never"), now=NOW) is None


def test_console_sessions_expired_is_not_live_and_deleted_at_the_next_login(
    db: Database,
) -> None:
    sessions = db.console_sessions
    old = session_id("old")
    sessions.start(old, key_id=KEY_ID, now=NOW, expires_at=NOW + MAX_AGE)
    later = NOW + MAX_AGE
    assert sessions.live(old, now=later - timedelta(seconds=1)) is not None
    assert sessions.live(old, now=later) is None
    sessions.start(session_id("new"), key_id=KEY_ID, now=later, expires_at=later + MAX_AGE)
    with db.engine.connect() as connection:
        ids = connection.execute(text("SELECT id FROM console_sessions")).scalars().all()
    assert ids == [session_id("new")]


def test_0009_adds_console_sessions_to_an_0008_store(tmp_path: Path) -> None:
    engine: Engine = make_engine(f"sqlite:///{tmp_path}/old.db")
    upgrade(engine, "0008")
    upgrade(engine, "0009")
    sessions = Database(engine).console_sessions
    sessions.start(session_id("s"), key_id=KEY_ID, now=NOW, expires_at=NOW + MAX_AGE)
    live = sessions.live(session_id("s"), now=NOW)
    revision = current_revision(engine)
    engine.dispose()
    assert revision == "0009"
    assert live is not None
    assert live.key_id == KEY_ID
