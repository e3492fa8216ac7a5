"""The web console without a browser: login and its cookie, CSRF, namespaces (404 for another's
pages and forms), and that its actions write what the API's do (TestClient)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from secretary.config import Settings
from store.api.app import create_app
from store.api.console import pages_runs
from store.api.console.pages_runs import since_time
from store.api.console.session import COOKIE, MAX_AGE
from store.kinds import MemoryStatus
from store.operations import (
    CreateMemory,
    CreateRelation,
    Operation,
    Purge,
    SetStatus,
    UpdateMemory,
)
from store.service import Store
from store.settings import ApiKey, ApiSettings
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
KEY_A = "key-a-0123456789"
KEY_B = "key-b-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="agent a"),
    ApiKey(key=KEY_B, namespaces=("b",), name="agent b"),
)


def open_store(data_dir: Path, keys: tuple[ApiKey, ...] = ()) -> Store:
    settings = Settings(data_dir=data_dir, api=ApiSettings(keys=keys))
    store = Store.open(settings, create=True, embedder=FakeEmbedder())
    for ns in ("a", "b"):
        store.add_memories(
            ns,
            [{"content": f"{ns}: I like tea"}, {"content": f"{ns}: hiking in the Alps"}],
            now=NOW,
        )
    return store


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "keyed", KEYS)
    yield store
    store.close()


@pytest.fixture
def open_(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "open")
    yield store
    store.close()


def client(store: Store) -> TestClient:
    return TestClient(create_app(store, clock=lambda: NOW, start_workers=False))


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def login(web: TestClient, key: str) -> str:
    """Log in with ``key``; return the session's CSRF token."""
    token = csrf(web.get("/ui/login").text)
    response = web.post("/ui/login", data={"csrf": token, "key": key}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return csrf(web.get("/ui/overnight").text)


def memory_id(store: Store, ns: str, content: str) -> int:
    (found,) = [m for m in store.db.memories.many(ns, range(1, 100)) if m.content == content]
    return found.id


def test_console_keyed_without_login_sends_to_login(keyed: Store) -> None:
    with client(keyed) as web:
        response = web.get("/ui/overnight", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/ui/login")


def test_console_login_unknown_key_is_refused(keyed: Store) -> None:
    with client(keyed) as web:
        token = csrf(web.get("/ui/login").text)
        response = web.post("/ui/login", data={"csrf": token, "key": "wrong-key-123"})
        after = web.get("/ui/overnight", follow_redirects=False)
    assert response.status_code == 401
    assert "unknown key" in response.text
    assert after.status_code == 303


def test_console_login_cookie_is_httponly_strict_and_holds_no_key(keyed: Store) -> None:
    with client(keyed) as web:
        token = csrf(web.get("/ui/login").text)
        response = web.post("/ui/login", data={"csrf": token, "key": KEY_A}, follow_redirects=False)
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
    assert KEY_A not in cookie
    assert KEY_A not in response.headers["location"]


def test_console_login_without_csrf_is_refused(keyed: Store) -> None:
    with client(keyed) as web:
        web.get("/ui/login")
        response = web.post("/ui/login", data={"key": KEY_A})
        after = web.get("/ui/overnight", follow_redirects=False)
    assert response.status_code == 403
    assert after.status_code == 303


def test_console_scoped_key_sees_only_its_namespace(keyed: Store) -> None:
    b_tea = memory_id(keyed, "b", "b: I like tea")
    (b_ingest,) = keyed.db.records.find(namespaces=["b"])
    with client(keyed) as web:
        login(web, KEY_A)
        overnight = web.get("/ui/overnight?every=1").text
        listing = web.get("/ui/memories").text
        pages = [
            web.get(f"/ui/memories/b/{b_tea}"),
            web.get(f"/ui/memories/b/{b_tea}/forget"),
            web.get("/ui/memories?namespace=b"),
            web.get(f"/ui/runs/{b_ingest.id}"),
            web.get(f"/ui/runs/{b_ingest.id}/undo"),
        ]
    assert "a: I like tea" not in overnight  # (runs are listed, not memories)
    assert f"#{b_ingest.id}<" not in overnight
    assert "a: I like tea" in listing
    assert "b: I like tea" not in listing
    assert [page.status_code for page in pages] == [404] * 5
    assert all("b: I like tea" not in page.text for page in pages)


def test_console_scoped_key_cannot_act_on_another_namespace(keyed: Store) -> None:
    b_tea = memory_id(keyed, "b", "b: I like tea")
    (b_ingest,) = keyed.db.records.find(namespaces=["b"])
    before = list(keyed.db.memories.export("b"))
    with client(keyed) as web:
        token = login(web, KEY_A)
        posts = [
            web.post(f"/ui/memories/b/{b_tea}/edit", data={"csrf": token, "content": "mine"}),
            web.post(f"/ui/memories/b/{b_tea}/delete", data={"csrf": token}),
            web.post(
                f"/ui/memories/b/{b_tea}/forget",
                data={"csrf": token, "confirm": "irreversible"},
            ),
            web.post(f"/ui/runs/{b_ingest.id}/undo", data={"csrf": token, "force": "yes"}),
            web.post(f"/ui/plans/{b_ingest.id}/approve", data={"csrf": token}),
        ]
    assert [post.status_code for post in posts] == [404] * 5
    assert list(keyed.db.memories.export("b")) == before


def test_console_post_without_csrf_changes_nothing(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    (ingest,) = open_.db.records.find(namespaces=["a"])
    before = list(open_.db.memories.export("a"))
    with client(open_) as web:
        web.get("/ui/overnight")
        posts = [
            web.post(f"/ui/memories/a/{tea}/edit", data={"content": "changed"}),
            web.post(f"/ui/memories/a/{tea}/delete", data={"csrf": "forged"}),
            web.post(f"/ui/memories/a/{tea}/forget", data={"confirm": "irreversible"}),
            web.post(f"/ui/runs/{ingest.id}/undo", data={}),
        ]
    assert [post.status_code for post in posts] == [403] * 4
    assert list(open_.db.memories.export("a")) == before
    assert len(open_.db.records.find()) == 2  # the two ingests, nothing more


def test_console_token_of_another_session_is_refused(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as one, client(open_) as other:
        theirs = csrf(one.get(f"/ui/memories/a/{tea}").text)
        other.get("/ui/overnight")
        response = other.post(f"/ui/memories/a/{tea}/edit", data={"csrf": theirs, "content": "x"})
    assert response.status_code == 403
    assert open_.db.memories.get("a", tea).content == "a: I like tea"  # type: ignore[union-attr]


def test_console_forged_cookie_is_a_new_session(keyed: Store) -> None:
    with client(keyed) as web:
        login(web, KEY_A)
        value = web.cookies[COOKIE]
        web.cookies.clear()
        web.cookies.set(COOKIE, value[:-4] + ("0000" if not value.endswith("0000") else "1111"))
        response = web.get("/ui/overnight", follow_redirects=False)
    assert response.status_code == 303


def test_console_logout_ends_the_session(keyed: Store) -> None:
    with client(keyed) as web:
        token = login(web, KEY_A)
        web.post("/ui/logout", data={"csrf": token})
        response = web.get("/ui/overnight", follow_redirects=False)
    assert response.status_code == 303


def with_cookie(web: TestClient, value: str) -> TestClient:
    """``web`` holding ``value`` as its console cookie, and nothing else (say, an old copy)."""
    web.cookies.clear()
    web.cookies.set(COOKIE, value)
    return web


def test_console_logout_refuses_the_old_cookie_and_its_form_token(keyed: Store) -> None:
    with client(keyed) as web:
        token = login(web, KEY_A)
        old = web.cookies[COOKIE]
        logout = web.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
        page = with_cookie(web, old).get("/ui/status", follow_redirects=False)
        dream = with_cookie(web, old).post(
            "/ui/status/dream/a", data={"csrf": token}, follow_redirects=False
        )
    assert (logout.status_code, logout.headers["location"]) == (303, "/ui/login")
    assert (page.status_code, page.headers["location"]) == (303, "/ui/login")
    assert dream.status_code == 403
    assert keyed.db.dream_requests.recent() == []


def test_console_logout_ends_only_its_own_session(keyed: Store) -> None:
    with client(keyed) as phone, client(keyed) as laptop:
        phone_token = login(phone, KEY_A)
        laptop_token = login(laptop, KEY_A)
        phone.post("/ui/logout", data={"csrf": phone_token})
        gone = phone.get("/ui/overnight", follow_redirects=False)
        kept = laptop.post("/ui/status/dream/a", data={"csrf": laptop_token})
    assert gone.status_code == 303
    assert kept.status_code == 200
    assert [r.requested_by for r in keyed.db.dream_requests.recent()] == ["console:agent a"]


def test_console_login_again_ends_the_session_before(keyed: Store) -> None:
    with client(keyed) as web:
        login(web, KEY_A)
        before = web.cookies[COOKIE]
        login(web, KEY_B)
        response = with_cookie(web, before).get("/ui/overnight", follow_redirects=False)
    assert response.status_code == 303


def test_console_session_survives_a_restart_and_another_process(tmp_path: Path) -> None:
    store = open_store(tmp_path / "restarted", KEYS)
    with client(store) as web:
        token = login(web, KEY_A)
        cookie = web.cookies[COOKIE]
    settings = store.settings
    store.close()
    # The server restarts (a new store, a new console secret); two processes serve it.
    one = Store.open(settings, embedder=FakeEmbedder())
    two = Store.open(settings, embedder=FakeEmbedder())
    try:
        with client(one) as web, client(two) as other:
            page = with_cookie(web, cookie).get("/ui/status")
            dream = web.post("/ui/status/dream/a", data={"csrf": token}, follow_redirects=False)
            said = web.get(dream.headers["location"]).text
            with_cookie(other, cookie).post("/ui/logout", data={"csrf": token})
            after = with_cookie(web, cookie).get("/ui/status", follow_redirects=False)
        queued = one.db.dream_requests.recent()
    finally:
        one.close()
        two.close()
    assert page.status_code == 200
    assert "agent a" in page.text
    assert dream.status_code == 303
    assert "queued for a" in said
    assert [r.requested_by for r in queued] == ["console:agent a"]
    assert after.status_code == 303  # logged out by the other process


def test_console_expired_session_is_refused(keyed: Store) -> None:
    now = [NOW]
    with TestClient(create_app(keyed, clock=lambda: now[0], start_workers=False)) as web:
        token = login(web, KEY_A)
        cookie = web.cookies[COOKIE]
        now[0] = NOW + MAX_AGE - timedelta(seconds=1)
        fresh = with_cookie(web, cookie).get("/ui/overnight", follow_redirects=False)
        now[0] = NOW + MAX_AGE
        stale = with_cookie(web, cookie).get("/ui/overnight", follow_redirects=False)
        dream = with_cookie(web, cookie).post("/ui/status/dream/a", data={"csrf": token})
    assert fresh.status_code == 200
    assert (stale.status_code, stale.headers["location"]) == (303, "/ui/login")
    assert dream.status_code == 403
    assert keyed.db.dream_requests.recent() == []


def test_console_edit_writes_an_undoable_edit_record(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        response = web.post(
            f"/ui/memories/a/{tea}/edit",
            data={"csrf": token, "content": "a: I like green tea", "version": "1"},
            follow_redirects=False,
        )
        page = web.get(response.headers["location"]).text
    assert response.status_code == 303
    memory = open_.db.memories.get("a", tea)
    assert memory is not None
    assert memory.content == "a: I like green tea"
    (record,) = open_.db.records.find(job="edit")
    assert record.stats["by"] == "console:open"
    assert f"record #{record.id}" in page


def test_console_edit_keeps_a_tag_holding_a_comma(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    open_.edit("a", tea, {"tags": ["a,b", "c"]}, now=NOW)
    with client(open_) as web:
        page = web.get(f"/ui/memories/a/{tea}").text
        token = csrf(page)
        shown = re.search(r'name="tags" value="([^"]*)"', page)
        assert shown is not None
        web.post(
            f"/ui/memories/a/{tea}/edit",
            data={"csrf": token, "tags": html.unescape(shown.group(1)), "importance": "7"},
        )
    memory = open_.db.memories.get("a", tea)
    assert memory is not None
    assert (memory.tags, memory.importance) == (("a,b", "c"), 7)


def test_console_edit_of_a_stale_version_is_refused(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    open_.edit("a", tea, {"content": "a: I like coffee"}, now=NOW)
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        response = web.post(
            f"/ui/memories/a/{tea}/edit",
            data={"csrf": token, "content": "a: I like green tea", "version": "1"},
        )
    assert response.status_code == 409
    assert open_.db.memories.get("a", tea).content == "a: I like coffee"  # type: ignore[union-attr]


def test_console_delete_then_undo_from_its_run_page(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    before = list(open_.db.memories.export("a"))
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        web.post(f"/ui/memories/a/{tea}/delete", data={"csrf": token, "version": "1"})
        (deleted,) = open_.db.records.find(job="delete")
        preview = web.get(f"/ui/runs/{deleted.id}/undo")
        undone = web.post(
            f"/ui/runs/{deleted.id}/undo", data={"csrf": token}, follow_redirects=False
        )
    assert "Dry run: nothing has been written yet" in preview.text
    assert undone.status_code == 303
    assert list(open_.db.memories.export("a")) == before


def test_console_undo_with_conflicts_needs_force(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    open_.edit("a", tea, {"content": "a: I like coffee"}, now=NOW)
    (edited,) = open_.db.records.find(job="edit")
    open_.edit("a", tea, {"content": "a: I like cocoa"}, now=NOW)
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        preview = web.get(f"/ui/runs/{edited.id}/undo").text
        refused = web.post(f"/ui/runs/{edited.id}/undo", data={"csrf": token})
    assert "Conflicts (1)" in preview
    assert refused.status_code == 409
    assert open_.db.memories.get("a", tea).content == "a: I like cocoa"  # type: ignore[union-attr]


def linked(store: Store) -> tuple[int, int, int]:
    """An ingest (A) of a new memory, then a linker run (B) relating it: B depends on A.
    Return A's record id, B's and the new memory's id."""
    added = store.add_memories("a", [{"content": "a: met Tom at the station"}], now=NOW)
    tea = memory_id(store, "a", "a: I like tea")
    link = CreateRelation(source=added.ids[0], target=tea, type="causal", strength=0.5)
    applied = store.db.writer.apply("a", "linker", [link], now=NOW + timedelta(minutes=5))
    assert added.record_id is not None
    assert applied.record_id is not None
    return added.record_id, applied.record_id, added.ids[0]


def test_console_undo_preview_names_the_runs_that_depend_on_it(open_: Store) -> None:
    ingest, linker, _ = linked(open_)
    with client(open_) as web:
        page = web.get(f"/ui/runs/{ingest}/undo").text
    dependents = page.split('<ol class="dependents">')[1].split("</ol>")[0]
    assert f'<a href="/ui/runs/{linker}">#{linker}</a> <strong>linker</strong>' in dependents
    assert "2026-11-24 06:05 UTC" in dependents
    assert "created relation" in dependents
    assert "Newest first, the order to undo them in" in page
    assert f'href="/ui/runs/{ingest}/undo?cascade=1">Undo with its 1 dependent run' in page


def test_console_cascade_dry_run_lists_every_run_and_writes_nothing(open_: Store) -> None:
    ingest, linker, _ = linked(open_)
    export, records = list(open_.db.memories.export("a")), open_.db.records.find(limit=100)
    with client(open_) as web:
        page = web.get(f"/ui/runs/{ingest}/undo?cascade=1").text
    parts = re.findall(r'<section class="card part" data-record="(\d+)">', page)
    assert parts == [str(linker), str(ingest)]  # newest first, the run itself last
    assert "delete relation" in page.split(f'data-record="{linker}"')[1].split("</section>")[0]
    assert "delete memory" in page.split(f'data-record="{ingest}"')[1].split("</section>")[0]
    assert "Dry run: nothing has been written yet" in page
    assert '<input type="hidden" name="cascade" value="1">' in page
    assert f"Undo run #{ingest} with #{linker}</button>" in page
    assert list(open_.db.memories.export("a")) == export
    assert open_.db.records.find(limit=100) == records


def test_console_undo_with_cascade_undoes_the_dependent_runs_too(open_: Store) -> None:
    ingest, linker, new = linked(open_)
    with client(open_) as web:
        token = csrf(web.get("/ui/status").text)
        refused = web.post(f"/ui/runs/{ingest}/undo", data={"csrf": token})
        forged = web.post(f"/ui/runs/{ingest}/undo", data={"csrf": "forged", "cascade": "1"})
        undone = web.post(
            f"/ui/runs/{ingest}/undo",
            data={"csrf": token, "cascade": "1"},
            follow_redirects=False,
        )
        page = web.get(undone.headers["location"]).text
        dependent_page = web.get(f"/ui/runs/{linker}").text
    assert (refused.status_code, forged.status_code) == (409, 403)
    assert f'<a href="/ui/runs/{linker}">#{linker}</a> <strong>linker</strong>' in refused.text
    assert undone.status_code == 303
    assert f'undone with <a href="/ui/runs/{linker}">#{linker}</a>' in page
    assert f'with <a href="/ui/runs/{ingest}">#{ingest}</a>' in dependent_page
    statuses = {r.id: r.status for r in open_.db.records.many([ingest, linker])}
    assert statuses == {ingest: "undone", linker: "undone"}
    assert open_.db.memories.get("a", new) is None


def test_console_undo_cannot_cascade_past_an_erasure(open_: Store) -> None:
    added = open_.add_memories("a", [{"content": "a: an old note"}], now=NOW)
    (new,), later = added.ids, NOW + timedelta(minutes=1)
    archive = SetStatus(memory_id=new, status=MemoryStatus.ARCHIVED)
    open_.db.writer.apply("a", "auditor", [archive], now=later)
    purged = open_.db.writer.apply("a", "retention", [Purge(memory_id=new)], now=later).record_id
    export, records = list(open_.db.memories.export("a")), open_.db.records.find(limit=100)
    with client(open_) as web:
        token = csrf(web.get("/ui/status").text)
        preview = web.get(f"/ui/runs/{added.record_id}/undo").text
        cascade = web.get(f"/ui/runs/{added.record_id}/undo?cascade=1").text
        posted = web.post(f"/ui/runs/{added.record_id}/undo", data={"csrf": token, "cascade": "1"})
    assert f"#{purged}</a> (retention) erased what this undo needs" in preview
    assert "cannot be undone with its dependents" in preview
    assert "?cascade=1" not in preview
    for page in (cascade, posted.text):
        assert "It cannot be undone with its dependents" in page
        assert 'name="cascade"' not in page
    assert posted.status_code == 409
    assert list(open_.db.memories.export("a")) == export
    assert open_.db.records.find(limit=100) == records


def test_console_forget_asks_twice(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        first = web.get(f"/ui/memories/a/{tea}/forget")
        unconfirmed = web.post(
            f"/ui/memories/a/{tea}/forget", data={"csrf": token}, follow_redirects=False
        )
        still = open_.db.memories.get("a", tea)
        confirmed = web.post(
            f"/ui/memories/a/{tea}/forget",
            data={"csrf": token, "confirm": "irreversible"},
            follow_redirects=False,
        )
        gone = web.get(f"/ui/memories/a/{tea}")
    assert "cannot be undone" in first.text
    assert unconfirmed.headers["location"].endswith("/forget")
    assert still is not None
    assert confirmed.status_code == 303
    assert "said=forgot+1+memory+for+good" in confirmed.headers["location"]
    assert open_.db.memories.get("a", tea) is None
    assert gone.status_code == 404


def test_console_open_api_pages_render(open_: Store) -> None:
    with client(open_) as web:
        pages = {
            url: web.get(url)
            for url in (
                "/ui/overnight?every=1",
                "/ui/runs/1",
                "/ui/plans",
                "/ui/memories?namespace=a",
                "/ui/memories?namespace=a&q=tea",
                "/ui/status",
                "/ui/static/console.css",
            )
        }
    assert {url: r.status_code for url, r in pages.items()} == dict.fromkeys(pages, 200)
    assert 'class="bar"' in pages["/ui/memories?namespace=a&q=tea"].text
    assert "no-store" in pages["/ui/status"].headers["cache-control"]


def test_console_does_not_change_the_api(open_: Store) -> None:
    with client(open_) as web:
        response = web.get("/v1/memories/1?namespace=a")
    assert response.status_code == 200
    assert COOKIE not in response.headers.get("set-cookie", "")


def test_console_malformed_address_is_a_404_page(open_: Store) -> None:
    with client(open_) as web:
        response = web.get("/ui/runs/not-a-number")
    assert response.status_code == 404
    assert "text/html" in response.headers["content-type"]


HUGE = "99999999999999999999999"  # beyond a 64-bit id: the database driver would overflow


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/ui/runs/{HUGE}"),
        ("GET", f"/ui/runs/{HUGE}/undo"),
        ("POST", f"/ui/runs/{HUGE}/undo"),
        ("POST", f"/ui/plans/{HUGE}/approve"),
        ("GET", f"/ui/memories/a/{HUGE}"),
        ("POST", f"/ui/memories/a/{HUGE}/edit"),
        ("POST", f"/ui/memories/a/{HUGE}/delete"),
        ("GET", f"/ui/memories/a/{HUGE}/forget"),
        ("POST", f"/ui/memories/a/{HUGE}/forget"),
    ],
)
def test_console_id_beyond_any_row_is_a_404_page(open_: Store, method: str, path: str) -> None:
    with client(open_) as web:
        token = csrf(web.get("/ui/login").text)
        response = web.request(method, path, data={"csrf": token} if method == "POST" else None)
    assert response.status_code == 404, response.text
    assert "text/html" in response.headers["content-type"]


def test_console_failure_is_an_error_page(open_: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pages_runs, "record_diff", broken)
    (run,) = open_.db.records.find(namespaces=["a"])
    app = create_app(open_, clock=lambda: NOW, start_workers=False)
    with TestClient(app, raise_server_exceptions=False) as web:
        response = web.get(f"/ui/runs/{run.id}")
    assert response.status_code == 500
    assert "text/html" in response.headers["content-type"]
    assert "server log" in response.text
    assert response.headers["cache-control"] == "no-store"  # as every page of the console
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_console_run_page_tells_updates_relations_and_traits(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    alps = memory_id(open_, "a", "a: hiking in the Alps")
    operations: list[Operation] = [
        UpdateMemory(memory_id=tea, changes={"content": "a: I like green tea"}),
        CreateRelation(source=tea, target=alps, type="thematic", strength=0.5),
        CreateMemory(key="t", content="a: loves the outdoors", type="preference", event_time=NOW),
        CreateRelation(source="t", target=alps, type="derived_from", strength=1.0),
    ]
    applied = open_.db.writer.apply("a", "soul_mapper", operations, now=NOW)
    with client(open_) as web:
        page = web.get(f"/ui/runs/{applied.record_id}").text
    updated = page.split('kind-updated">')[1].split('<div class="entry ')[0]
    assert "a: I like tea" in updated.split('class="to"')[0]  # before, on the left
    assert "a: I like green tea" in updated.split('class="to"')[1]  # after, on the right
    relation = page.split('kind-relations_created">')[1].split('<div class="entry ')[0]
    assert "a: I like green tea" in relation
    assert "a: hiking in the Alps" in relation
    trait = page.split('kind-trait">')[1]
    assert "a: loves the outdoors" in trait
    assert "a: hiking in the Alps" in trait.split('class="evidence"')[1]


def test_console_refuses_a_large_form_before_reading_it(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        response = web.post(
            f"/ui/memories/a/{tea}/edit", data={"csrf": token, "content": "x" * 300_000}
        )
    assert response.status_code == 413
    assert open_.db.memories.get("a", tea).content == "a: I like tea"  # type: ignore[union-attr]


def test_console_escapes_what_memories_say(open_: Store) -> None:
    open_.add_memories("a", [{"content": "<script>alert('x')</script>"}], now=NOW)
    with client(open_) as web:
        page = web.get("/ui/memories?namespace=a").text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert" in page


def test_console_shows_only_messages_it_sealed_for_this_session(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        done = web.post(
            f"/ui/memories/a/{tea}/edit",
            data={"csrf": token, "content": "a: I like green tea"},
            follow_redirects=False,
        )
        sealed = web.get(done.headers["location"]).text
        forged = web.get(f"/ui/memories/a/{tea}?said=plan+approved&seal=0000").text
    with client(open_) as other:
        elsewhere = other.get(done.headers["location"]).text
    assert "saved as record #" in sealed
    assert "plan approved" not in forged
    assert "saved as record #" not in elsewhere


def test_console_edit_moves_event_time_and_sets_metadata(open_: Store) -> None:
    tea = memory_id(open_, "a", "a: I like tea")
    with client(open_) as web:
        token = csrf(web.get(f"/ui/memories/a/{tea}").text)
        bad = web.post(f"/ui/memories/a/{tea}/edit", data={"csrf": token, "metadata": "[1, 2]"})
        good = web.post(
            f"/ui/memories/a/{tea}/edit",
            data={
                "csrf": token,
                "event_time": "2026-11-01T09:30:00+00:00",
                "metadata": '{"mood": "calm"}',
            },
        )
    assert bad.status_code == 422
    assert "must be a JSON object" in bad.text
    assert good.status_code == 200
    memory = open_.db.memories.get("a", tea)
    assert memory is not None
    assert memory.event_time == datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
    assert dict(memory.metadata) == {"mood": "calm"}
    assert len(open_.db.records.find(job="edit")) == 1  # the refused one wrote nothing


def test_console_overnight_reads_its_time_as_utc_unless_it_says_otherwise() -> None:
    assert since_time("2026-11-23T18:21", NOW) == datetime(2026, 11, 23, 18, 21, tzinfo=UTC)
    assert since_time("2026-11-23T18:21-05:00", NOW) == datetime(2026, 11, 23, 23, 21, tzinfo=UTC)
    assert since_time("yesterday", NOW) == datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
    assert since_time(None, NOW) == datetime(2026, 11, 23, 6, 0, tzinfo=UTC)


def test_console_admin_key_sees_every_namespace(tmp_path: Path) -> None:
    admin = "key-admin-0123456789"
    store = open_store(tmp_path / "admin", (*KEYS, ApiKey(key=admin, namespaces=("*",))))
    try:
        b_tea = memory_id(store, "b", "b: I like tea")
        with client(store) as web:
            login(web, admin)
            page = web.get(f"/ui/memories/b/{b_tea}")
            listing = web.get("/ui/memories?namespace=a").text
        assert page.status_code == 200
        assert "b: I like tea" in page.text
        assert "a: I like tea" in listing
    finally:
        store.close()


def test_console_dream_now_queues_a_request_the_status_page_follows(open_: Store) -> None:
    with client(open_) as web:
        token = csrf(web.get("/ui/status").text)
        response = web.post("/ui/status/dream/a", data={"csrf": token}, follow_redirects=False)
        assert response.status_code == 303
        status = web.get(response.headers["location"]).text
    (queued,) = open_.db.dream_requests.recent()
    assert (queued.namespace, queued.jobs, queued.status) == ("a", (), "pending")
    assert queued.requested_by == "console:open"
    assert f"dream request #{queued.id} queued for a" in status
    assert f"#{queued.id} <span" in status  # listed among the requests, still pending
    assert "pending" in status


def test_console_dream_now_only_for_the_viewer_namespaces_and_with_csrf(keyed: Store) -> None:
    keyed.db.dream_requests.enqueue(
        namespace="b", jobs=["linker"], retry_quarantined=False, requested_by="api:b", now=NOW
    )
    with client(keyed) as web:
        token = login(web, KEY_A)
        foreign = web.post("/ui/status/dream/b", data={"csrf": token})
        forged = web.post("/ui/status/dream/a", data={"csrf": "forged"})
        status = web.get("/ui/status").text
    assert (foreign.status_code, forged.status_code) == (404, 403)
    assert [r.requested_by for r in keyed.db.dream_requests.recent()] == ["api:b"]
    assert "api:b" not in status  # another namespace's request is not shown
    assert 'action="/ui/status/dream/a"' in status
    assert 'action="/ui/status/dream/b"' not in status


def test_console_namespace_without_memories_says_so_rather_than_looking_empty(
    open_: Store,
) -> None:
    with client(open_) as web:
        page = web.get("/ui/memories?namespace=nope").text
        searched = web.get("/ui/memories?namespace=nope&q=tea").text
        home = web.get("/ui/memories?namespace=a").text
    for shown in (page, searched):
        assert (
            "namespace &#39;nope&#39; holds no memories (namespaces with memories: a, b)" in shown
        )
        assert '<option value="nope" selected>' in shown
    assert "holds no memories" not in home


def test_console_undo_preview_counts_every_run_the_cascade_would_undo(open_: Store) -> None:
    added = open_.add_memories("a", [{"content": "a: met Tom at the station"}], now=NOW)
    tom = added.ids[0]
    noted = open_.db.writer.apply(
        "a",
        "consolidator",
        [
            CreateMemory(key="n", content="a: Tom is a friend", type="fact", event_time=NOW),
            CreateRelation(source="n", target=tom, type="derived_from", strength=1.0),
        ],
        now=NOW + timedelta(minutes=5),
    )
    (note,) = [m for m in open_.db.memories.after("a", tom, limit=10)]
    # A later edit of the note depends on the run that made it, not on the ingest.
    open_.edit("a", note.id, {"content": "a: Tom is an old friend"}, now=NOW + timedelta(hours=1))
    with client(open_) as web:
        page = web.get(f"/ui/runs/{added.record_id}/undo").text
    dependents = page.split('<ol class="dependents">')[1].split("</ol>")[0]
    assert dependents.count("<li data-record=") == 1  # the consolidator's run only
    assert f"#{noted.record_id}" in dependents
    assert "Undo with its 2 dependent runs" in page
    assert "(the run above and those that depend on it)" in page


def test_console_namespace_without_memories_names_only_the_viewer_s_others(tmp_path: Path) -> None:
    key = ApiKey(key="key-ac-0123456789", namespaces=("a", "c"), name="agent a and c")
    store = open_store(tmp_path / "scoped", (key,))
    try:
        with client(store) as web:
            login(web, key.key)
            page = web.get("/ui/memories?namespace=c").text
    finally:
        store.close()
    assert "namespace &#39;c&#39; holds no memories (namespaces with memories: a)" in page
