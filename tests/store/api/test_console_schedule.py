"""The console's Status page and schedule changes through the secretary's ConsoleOps."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from secretary.console_ops import console_ops
from store.api.app import create_app
from store.service import Store
from store.settings import ApiKey, ApiSettings
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
KEY_A = "key-a-0123456789"
KEY_ALL = "key-all-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="a"),
    ApiKey(key=KEY_ALL, namespaces=("a", "b"), name="operator"),
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    settings = Settings(data_dir=tmp_path, api=ApiSettings(keys=KEYS))
    opened = Store.open(settings, create=True, embedder=FakeEmbedder())
    for ns in ("a", "b"):
        opened.add_memories(ns, [{"content": f"{ns}: tea"}], now=NOW)
    yield opened
    opened.close()


def client(store: Store) -> TestClient:
    settings = store.settings
    assert isinstance(settings, Settings)
    app = create_app(
        store, clock=lambda: NOW, start_workers=False, console=console_ops(store, settings)
    )
    return TestClient(app)


def login(web: TestClient, key: str) -> str:
    token = re.findall(r'name="csrf" value="([^"]+)"', web.get("/ui/login").text)[0]
    web.post("/ui/login", data={"csrf": token, "key": key})
    return str(re.findall(r'name="csrf" value="([^"]+)"', web.get("/ui/status").text)[0])


def test_console_cron_preview_shows_five_firings_and_saves_nothing(store: Store) -> None:
    with client(store) as web:
        login(web, KEY_ALL)
        page = web.get("/ui/status/schedule/auditor", params={"cron": "30 4 * * 1"}).text
    assert page.count("<li>2026-") == 5
    assert "2026-11-30 04:30 UTC" in page  # the next Monday
    assert store.db.schedules.overrides() == {}


def test_console_invalid_cron_is_explained_and_not_saved(store: Store) -> None:
    with client(store) as web:
        token = login(web, KEY_ALL)
        preview = web.get("/ui/status/schedule/auditor", params={"cron": "0 0 30 2 *"})
        saved = web.post("/ui/status/schedule/auditor/cron", data={"csrf": token, "cron": "nope"})
    assert preview.status_code == 422
    assert "never comes" in preview.text
    assert "not changed" in saved.text
    assert store.db.schedules.overrides() == {}


def test_console_schedule_needs_a_key_for_every_namespace(store: Store) -> None:
    with client(store) as web:
        token = login(web, KEY_A)
        status = web.get("/ui/status").text
        preview = web.get("/ui/status/schedule/auditor", params={"cron": "0 3 * * *"})
        paused = web.post("/ui/status/schedule/auditor/pause", data={"csrf": token})
    assert "Set cron" not in status
    assert (preview.status_code, paused.status_code) == (404, 404)
    assert store.db.schedules.overrides() == {}


def test_console_pause_and_resume_are_stored(store: Store) -> None:
    with client(store) as web:
        token = login(web, KEY_ALL)
        web.post("/ui/status/schedule/linker/pause", data={"csrf": token})
        paused = store.db.schedules.overrides()["linker"].paused
        page = web.post("/ui/status/schedule/linker/resume", data={"csrf": token}).text
    assert paused
    assert not store.db.schedules.overrides()["linker"].paused
    assert "linker: resumed" in page


def test_console_unknown_job_is_not_found(store: Store) -> None:
    with client(store) as web:
        token = login(web, KEY_ALL)
        preview = web.get("/ui/status/schedule/dreamer")
        paused = web.post("/ui/status/schedule/dreamer/pause", data={"csrf": token})
    assert preview.status_code == 404
    assert "not changed" in paused.text
    assert store.db.schedules.overrides() == {}


def test_console_status_buttons_name_their_job_and_namespace(store: Store) -> None:
    # A screen reader lists the buttons by name: six "Pause" and two "Dream now" say nothing.
    with client(store) as web:
        login(web, KEY_ALL)
        page = web.get("/ui/status").text
    names = re.findall(r'<(?:button|a)\b[^>]*aria-label="([^"]+)"', page)
    assert {"Pause auditor", "Pause linker", "Dream now on a", "Dream now on b"} <= set(names)
    assert "Set the cron of auditor…" in names
    assert len(names) == len(set(names))
