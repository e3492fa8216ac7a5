"""The console's session cookie and CSRF tokens (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store.api.console.session import (
    MAX_AGE,
    csrf_ok,
    csrf_token,
    decode,
    encode,
    fingerprint,
    new_session,
)

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
SECRET = b"s" * 32


def test_session_round_trips_through_its_cookie() -> None:
    session = new_session(NOW, fingerprint("key-a-0123456789"))
    assert decode(SECRET, encode(SECRET, session), NOW + timedelta(hours=1)) == session


def test_session_cookie_names_the_key_by_fingerprint_only() -> None:
    value = encode(SECRET, new_session(NOW, fingerprint("key-a-0123456789")))
    assert "key-a" not in value


def test_session_tampered_other_secret_or_expired_is_none() -> None:
    session = new_session(NOW, "abc")
    value = encode(SECRET, session)
    other_key = value.replace(".abc.", ".abd.")
    assert decode(SECRET, other_key, NOW) is None
    assert decode(b"t" * 32, value, NOW) is None
    assert decode(SECRET, value, NOW + MAX_AGE + timedelta(seconds=1)) is None
    assert decode(SECRET, "garbage", NOW) is None
    assert decode(SECRET, None, NOW) is None


def test_csrf_token_is_bound_to_its_session() -> None:
    one, two = new_session(NOW), new_session(NOW)
    assert csrf_ok(SECRET, one, csrf_token(SECRET, one))
    assert not csrf_ok(SECRET, two, csrf_token(SECRET, one))
    assert not csrf_ok(SECRET, one, None)
    assert not csrf_ok(SECRET, one, "")
