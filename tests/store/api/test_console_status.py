"""The console's status page: the running daemons with what each runs, and the night's open
firings with their progress (TestClient; the browser tests check it fits a phone)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from store.api.app import create_app
from store.coordination.leases import Lease
from tests.store.api.test_console import KEY_A, KEYS, NOW, login, open_store

MINUTE = timedelta(minutes=1)


def text_of(html: str) -> str:
    """The page's words, tags dropped and spaces folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_console_status_shows_no_daemon_and_no_night(tmp_path: Path) -> None:
    store = open_store(tmp_path / "open")
    try:
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            page = web.get("/ui/status").text
    finally:
        store.close()
    assert "not running" in page
    assert 'class="daemons"' not in page
    assert "No night in progress." in page


def test_console_status_shows_daemons_what_they_run_and_the_night_in_the_viewer_namespaces(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "keyed", KEYS)
    holder = "web1.example.internal:4242:9f3c0a1b2c3d"
    Lease(store.db.engine, holder=holder, ttl=5 * MINUTE, clock=lambda: NOW - MINUTE).acquire()
    firings = store.db.firings
    key = "linker@2026-11-24T05:30:00+00:00"
    firings.open(key, jobs=("linker",), namespaces=["b", "a", "c"], opened_by=holder, now=NOW)
    first = firings.claim(holder=holder, now=NOW - 10 * MINUTE, ttl=20 * MINUTE)
    assert first is not None
    assert firings.finish(first.id, holder=holder, outcomes=[], now=NOW - 5 * MINUTE)
    assert firings.claim(holder=holder, now=NOW - 5 * MINUTE, ttl=20 * MINUTE) is not None
    assert firings.claim(holder=holder, now=NOW - 5 * MINUTE, ttl=20 * MINUTE) is not None
    try:
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            login(web, KEY_A)
            page = web.get("/ui/status").text
    finally:
        store.close()
    daemon = text_of(page.split(f'data-daemon="{holder}">')[1].split("</tr>")[0])
    # It runs "a" and "c": "c" is not the viewer's, counted, not named.
    assert daemon == (
        f"running {holder} 2026-11-24 05:59 UTC 2026-11-24 06:04 UTC linker on a and 1 more"
    ), daemon
    firing = text_of(page.split(f'data-firing="{key}">')[1].split("</tr>")[0])
    # 10 minutes for the one unit done: the two running end in 20 more.
    assert firing == "linker@05:30 1 of 3 2 0 about 2026-11-24 06:20 UTC", firing
    assert 'style="width: 33%"' in page
    assert "No night in progress." not in page
