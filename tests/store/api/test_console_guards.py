"""The console's login rate limit, the key that keeps anonymous sessions across restarts, and
its pages while the database is unavailable."""

from __future__ import annotations

import stat
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from store.api.app import create_app
from store.api.console.session import COOKIE
from store.api.console.throttle import LoginThrottle
from store.coordination.console_key import KEY_FILE, BadConsoleKey, console_key
from store.service import Store
from tests.store.api.test_console import KEY_A, KEYS, NOW, csrf, login, open_store


def failed_login(web: TestClient, token: str) -> int:
    response = web.post("/ui/login", data={"csrf": token, "key": "wrong-key-123"})
    return response.status_code


def test_console_login_sixth_failure_in_a_minute_gets_429_with_retry_after(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "keyed", KEYS)
    now = [NOW]
    try:
        with TestClient(create_app(store, clock=lambda: now[0], start_workers=False)) as web:
            token = csrf(web.get("/ui/login").text)
            codes = [failed_login(web, token) for _ in range(5)]
            now[0] = NOW + timedelta(seconds=20)
            limited = web.post("/ui/login", data={"csrf": token, "key": KEY_A})
            now[0] = NOW + timedelta(minutes=1)
            later = web.post(
                "/ui/login", data={"csrf": token, "key": KEY_A}, follow_redirects=False
            )
    finally:
        store.close()
    assert codes == [401] * 5
    # Even the right key waits: the limit is on the address, not on the guess.
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "40"
    assert "too many failed logins" in limited.text
    assert later.status_code == 303  # a minute after the first failure


def test_login_throttle_counts_each_address_apart_and_forgets_after_the_window() -> None:
    throttle = LoginThrottle(limit=2, window=timedelta(minutes=1))
    for _ in range(2):
        throttle.failed("10.0.0.1", NOW)

    assert throttle.retry_after("10.0.0.1", NOW + timedelta(seconds=1)) == 59
    assert throttle.retry_after("10.0.0.2", NOW) is None
    assert throttle.retry_after("10.0.0.1", NOW + timedelta(minutes=1)) is None


def test_console_anonymous_session_survives_a_restart(tmp_path: Path) -> None:
    store = open_store(tmp_path / "open")
    settings = store.settings
    try:
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            token = csrf(web.get("/ui/status").text)
            cookie = web.cookies[COOKIE]
    finally:
        store.close()
    again = Store.open(settings)
    try:
        with TestClient(create_app(again, clock=lambda: NOW, start_workers=False)) as web:
            web.cookies.set(COOKIE, cookie, path="/ui")
            posted = web.post("/ui/status/dream/a", data={"csrf": token}, follow_redirects=False)
        queued = again.db.dream_requests.recent()
    finally:
        again.close()
    assert posted.status_code == 303  # the form of before the restart is still this session's
    assert [r.requested_by for r in queued] == ["console:open"]


def test_console_key_is_made_once_with_mode_0600_and_read_back(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    first = console_key(data_dir)
    second = console_key(data_dir)

    path = data_dir / KEY_FILE
    assert first == second
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in data_dir.iterdir()] == [KEY_FILE]  # no draft left behind


def test_console_key_file_that_holds_something_else_is_an_error(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_text("not a key\n")

    with pytest.raises(BadConsoleKey, match="delete it"):
        console_key(tmp_path)


def _locked(*_args: object, **_kwargs: object) -> None:
    raise OperationalError("SELECT", {}, Exception("database is locked"))


def test_console_database_unavailable_answers_503_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path / "keyed", KEYS)
    app = create_app(store, clock=lambda: NOW, start_workers=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as web:
            login(web, KEY_A)
            monkeypatch.setattr(store.db.records, "find", _locked)  # a page's own read
            on_page = web.get("/ui/overnight")
            monkeypatch.setattr(store.db.console_sessions, "live", _locked)  # the session's
            on_session = web.get("/ui/overnight")
    finally:
        store.close()
    for response in (on_page, on_session):
        assert (response.status_code, response.headers["retry-after"]) == (503, "5")
        assert "the database is unavailable (database is locked)" in response.text
        assert "the console failed" not in response.text
