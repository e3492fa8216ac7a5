"""The web console in a real browser: headless Chromium (Debian's) driven by Playwright against
the API served by uvicorn on 127.0.0.1, over a store where the consolidator ran against the
scripted model. One server and one browser for the module; the tests run in file order (the
undo test takes back the run the diff test reads; forget comes last).

Each page is saved at desktop and phone width (tests/helpers/browser.py says where).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from secretary.config import Settings
from secretary.console_ops import console_ops
from secretary.jobs.registry import JOB_NAMES
from secretary.jobs.settings import JobsSettings
from secretary.runner import run_job
from secretary.status_config import status_config
from store.api.app import create_app
from store.clock import utc_now
from store.coordination.leases import Lease
from store.operations import CreateRelation
from store.service import Store
from store.settings import ApiKey, ApiSettings
from store.write.record_info import RecordInfo
from tests.helpers.browser import SCREENSHOTS, chromium, screenshot
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.live_server import live_server
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer
from tests.helpers.scripted_model import ScriptedModel
from tests.secretary.jobs.conftest import llm_settings

KEY_MAYA = "key-maya-0123456789"
KEY_ZOE = "key-zoe-0123456789"
KEY_BOTH = "key-both-0123456789"
KEYS = (
    ApiKey(key=KEY_MAYA, namespaces=("maya",), name="maya"),
    ApiKey(key=KEY_ZOE, namespaces=("zoe",), name="zoe"),
    ApiKey(key=KEY_BOTH, namespaces=("maya", "zoe"), name="operator"),
)
NOW = utc_now()
T = NOW - timedelta(days=2)
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
FRAGMENTS = (
    "went hiking in the Alps with Tom.",
    "and Tom reached the Alps summit hiking.",
    "and Tom hiking down the Alps.",
)


def episode(store: Store, who: str) -> None:
    name = who.capitalize()
    items: list[dict[str, Any]] = [
        {"content": f"Breakfast with Anna at the bakery, {who}.", "timestamp": T - DAY},
        {"content": f"{name} {FRAGMENTS[0]}", "timestamp": T},
        {"content": f"{name} {FRAGMENTS[1]}", "timestamp": T + 20 * MINUTE},
        {"content": f"{name} paid her electricity bill.", "timestamp": T + 30 * MINUTE},
        {"content": f"{name} {FRAGMENTS[2]}", "timestamp": T + 40 * MINUTE},
    ]
    store.add_memories(who, [{**i, "timestamp": i["timestamp"].isoformat()} for i in items], now=T)


@dataclass
class World:
    store: Store
    url: str
    browser: Any
    run_id: int  # maya's consolidator run
    plan_id: int  # zoe's consolidator plan, awaiting approval
    export_before: list[str]  # maya's export before the run

    def login(self, key: str) -> Any:
        """A new browser context logged in with ``key``; return a page of it."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{self.url}/ui/login")
        page.fill("#key", key)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r".*/ui/overnight.*"))
        return page


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with chromium() as browser, ScriptedOpenAIServer() as model:
        model.set_default(CHAT_COMPLETIONS, ScriptedModel())
        data = tmp_path_factory.mktemp("console")
        settings = Settings(
            data_dir=data, api=ApiSettings(keys=KEYS), llm=llm_settings(model, max_attempts=1)
        )
        store = Store.open(settings, create=True, embedder=FakeEmbedder())
        try:
            for who in ("maya", "zoe"):
                episode(store, who)
            before = list(store.db.memories.export("maya"))
            ran = run_job(store, settings, "consolidator", "maya", now=NOW - timedelta(hours=3))
            assert ran.status == "applied", ran.message
            approving = settings.model_copy(update={"jobs": JobsSettings(approval="changes")})
            planned = run_job(store, approving, "consolidator", "zoe", now=NOW - timedelta(hours=2))
            assert planned.record_id is not None, planned.message
            store.indexer.sync()
            app = create_app(
                store,
                start_workers=False,
                status=status_config(settings),
                console=console_ops(store, settings),
            )
            with live_server(app) as url:
                yield World(
                    store=store,
                    url=url,
                    browser=browser,
                    run_id=_record(ran),
                    plan_id=planned.record_id,
                    export_before=before,
                )
        finally:
            store.close()


def _record(outcome: Any) -> int:
    assert outcome.record_id is not None
    return int(outcome.record_id)


def test_browser_login_page(world: World) -> None:
    page = world.browser.new_page()
    page.goto(f"{world.url}/ui/overnight")
    assert page.url.endswith("/ui/login")
    screenshot(page, "login")
    page.close()


def test_browser_overnight_shows_the_dream_run(world: World) -> None:
    page = world.login(KEY_MAYA)
    row = page.locator(f"tr[data-record='{world.run_id}']")
    assert row.count() == 1
    assert "consolidator" in row.inner_text()
    assert "applied" in row.inner_text()
    assert "zoe" not in page.locator("main").inner_text()
    screenshot(page, "overnight")
    page.context.close()


def test_browser_run_diff_shows_the_merged_texts(world: World) -> None:
    page = world.login(KEY_MAYA)
    page.click(f"tr[data-record='{world.run_id}'] a")
    merged = page.locator(".entry.kind-merged")
    assert merged.count() == 1
    fragments = merged.locator(".from").inner_text()
    summary = merged.locator(".to").inner_text()
    for text in FRAGMENTS:
        assert f"Maya {text}" in fragments
    assert "Summary: Maya went hiking in the Alps with Tom." in summary
    screenshot(page, "run")
    page.context.close()


def test_browser_undo_shows_its_dry_run_then_restores_the_export(world: World) -> None:
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/runs/{world.run_id}")
    page.click("text=Undo this run")
    assert "Dry run: nothing has been written yet" in page.inner_text("main")
    assert world.store.db.records.get(world.run_id)[0].undone_by_id is None
    screenshot(page, "undo")
    page.click(f"button:has-text('Undo run #{world.run_id}')")
    page.wait_for_url(re.compile(r".*undone_by=\d+"))
    assert "Undone" in page.inner_text("main")
    assert list(world.store.db.memories.export("maya")) == world.export_before
    page.context.close()


def test_browser_undo_of_a_run_others_depend_on_offers_the_cascade(world: World) -> None:
    added = world.store.add_memories("maya", [{"content": "Maya met Tom at the station."}], now=NOW)
    (met,) = added.ids
    maya = world.store.db.memories.many("maya", range(1, 100))
    anna = next(m.id for m in maya if "Anna" in m.content)
    link = CreateRelation(source=met, target=anna, type="causal", strength=0.5)
    linker = _record(world.store.db.writer.apply("maya", "linker", [link], now=NOW))
    ingest = _record(added)
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/runs/{ingest}")
    page.click("text=Undo this run")
    dependent = page.locator(f"ol.dependents li[data-record='{linker}']")
    assert "linker" in dependent.inner_text()
    assert "created relation" in dependent.inner_text()
    screenshot(page, "undo-dependents")
    page.click("text=Undo with its 1 dependent run")
    parts = page.locator("section.part")
    assert [parts.nth(i).get_attribute("data-record") for i in range(parts.count())] == [
        str(linker),
        str(ingest),
    ]
    assert "Dry run: nothing has been written yet" in page.inner_text("main")
    assert world.store.db.memories.get("maya", met) is not None
    screenshot(page, "undo-cascade")
    page.click(f"button:has-text('Undo run #{ingest} with #{linker}')")
    page.wait_for_url(re.compile(r".*undone_by=\d+"))
    assert f"undone with #{linker}" in page.inner_text(".notice")
    statuses = [r.status for r in world.store.db.records.many([ingest, linker])]
    assert statuses == ["undone", "undone"]
    assert world.store.db.memories.get("maya", met) is None
    page.context.close()


def test_browser_approve_applies_a_pending_plan(world: World) -> None:
    page = world.login(KEY_ZOE)
    page.goto(f"{world.url}/ui/plans")
    plan = page.locator(f"section.plan[data-record='{world.plan_id}']")
    assert "Zoe went hiking in the Alps with Tom." in plan.inner_text()
    screenshot(page, "plans")
    plan.locator("text=Approve").click()
    page.wait_for_url(re.compile(r".*/ui/plans\?said=.*"))
    assert "applied" in page.inner_text(".notice")
    record, _ = world.store.db.records.get(world.plan_id)
    assert record.status == "applied"
    active = [m.content for m in world.store.db.memories.many("zoe", range(1, 100))]
    assert any(text.startswith("Summary: Zoe went hiking") for text in active)
    # The plan's page and the applying run's page lead to each other.
    applied = record.stats["applied_as"]
    page.goto(f"{world.url}/ui/runs/{world.plan_id}")
    page.click(f"dd >> a[href='/ui/runs/{applied}']")
    page.wait_for_url(re.compile(rf".*/ui/runs/{applied}$"))
    assert page.locator(f"dd >> a[href='/ui/runs/{world.plan_id}']").count() == 1
    page.context.close()


def test_browser_search_draws_the_score_breakdown(world: World) -> None:
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/memories")
    page.fill("input[name=q]", "hiking in the Alps")
    page.click("form.filters button")
    hits = page.locator("li.hit")
    assert hits.count() >= 1
    assert "hiking" in hits.first.inner_text()
    hits.first.locator("details.why summary").click()  # the breakdown is folded by default
    bars = hits.first.locator(".bar .fill")
    assert bars.count() >= 3
    widths = [bars.nth(i).evaluate("e => e.getBoundingClientRect().width") for i in range(3)]
    assert max(widths) > 0
    screenshot(page, "search")
    page.click("li.hit a")
    assert "History" in page.inner_text("main")
    screenshot(page, "memory")
    page.context.close()


def test_browser_status_previews_a_cron_before_saving(world: World) -> None:
    page = world.login(KEY_BOTH)
    page.goto(f"{world.url}/ui/status")
    screenshot(page, "status")
    page.click("tr[data-job='consolidator'] >> text=Set cron")
    page.fill("input[name=cron]", "0  3 * * *")
    page.click("text=Preview")
    firings = page.locator("ol.firings li")
    assert firings.count() == 5
    assert world.store.db.schedules.overrides().get("consolidator") is None  # not saved yet
    screenshot(page, "schedule")
    page.click("text=Save this schedule")
    page.wait_for_url(re.compile(r".*/ui/status\?said=.*"))
    assert "0 3 * * *" in page.inner_text("tr[data-job='consolidator']")
    override = world.store.db.schedules.overrides()["consolidator"]
    assert override.cron == "0 3 * * *"
    page.click("tr[data-job='consolidator'] >> text=Pause")
    assert world.store.db.schedules.overrides()["consolidator"].paused
    page.context.close()


def test_browser_dream_now_queues_a_request_the_status_page_follows(world: World) -> None:
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/status")
    page.click("form[action='/ui/status/dream/maya'] button")
    page.wait_for_url(re.compile(r".*/ui/status\?said=.*"))
    (queued,) = [r for r in world.store.db.dream_requests.recent() if r.namespace == "maya"]
    assert (queued.requested_by, queued.status) == ("console:maya", "pending")
    assert f"dream request #{queued.id} queued for maya" in page.inner_text(".notice")
    row = page.locator(f"tr[data-dream='{queued.id}']")
    assert "pending" in row.inner_text()
    screenshot(page, "dream-now")
    page.evaluate("window.notReloaded = true")
    # The daemon takes it and runs its jobs: the row shows each run as it ends, with no reload.
    requests = world.store.db.dream_requests
    assert requests.claim(picker="test-daemon", now=utc_now()) is not None
    first = {"job": "extractor", "namespace": "maya", "status": "nothing", "record_id": None}
    first["message"] = "applied nothing; dropped 3 items; 1 LLM call, 700 tokens"
    requests.progress(queued.id, picker="test-daemon", outcomes=[first])
    page.wait_for_selector(f"tr[data-dream='{queued.id}'] ul.dream-runs li")
    assert "running" in row.inner_text()
    assert "applied nothing; dropped 3 items" in row.inner_text()
    assert row.locator(".badge.tone-warn").count() == 1  # not green: it dropped what it got
    second = {**first, "job": "linker", "message": "nothing to do"}
    requests.finish(queued.id, picker="test-daemon", outcomes=[first, second], now=utc_now())
    page.wait_for_selector(f"tr[data-dream='{queued.id}']:not([data-following])")
    assert "done" in row.inner_text()
    assert "linker" in row.inner_text()
    assert page.evaluate("window.notReloaded") is True
    page.context.close()


def test_browser_status_shows_the_daemons_and_the_night_also_on_a_phone(world: World) -> None:
    db, now = world.store.db, utc_now()
    holder = "worker-with-a-rather-long-host-name.example.internal:4242:9f3c0a1b2c3d"
    lease = Lease(db.engine, holder=holder, ttl=timedelta(minutes=5))
    lease.acquire()
    names = ["maya", "zoe", *(f"user-{n:04}" for n in range(40))]
    key = "dream:9999"
    db.firings.open(key, jobs=JOB_NAMES, namespaces=names, opened_by=holder, now=now, manual=True)
    ttl = timedelta(minutes=5)
    units = [db.firings.claim(holder=holder, now=now, ttl=ttl) for _ in range(3)]
    assert db.firings.finish(_unit(units[0]), holder=holder, outcomes=[], now=now)
    try:
        page = world.login(KEY_BOTH)
        page.goto(f"{world.url}/ui/status")
        daemon = page.inner_text(f"tr[data-daemon='{holder}']")
        # It runs zoe and user-0000: the operator's key sees zoe, and the other counted.
        assert "dream request #9999 on zoe and 1 more" in daemon
        firing = page.inner_text(f"tr[data-firing='{key}']")
        assert "1 of 42" in firing
        assert "unknown until a unit is done" not in firing  # one is
        screenshot(page, "status-night")
        page.set_viewport_size({"width": 375, "height": 740})
        page.screenshot(path=str(SCREENSHOTS / "status-night-375.png"), full_page=True)
        wide = page.evaluate("document.scrollingElement.scrollWidth")
        assert wide <= 375, f"the status page is {wide} px wide at 375"
        page.context.close()
    finally:
        lease.release()
        for unit in units[1:]:
            db.firings.finish(_unit(unit), holder=holder, outcomes=[], now=utc_now())
        while (left := db.firings.claim(holder=holder, now=utc_now(), ttl=ttl)) is not None:
            db.firings.finish(left.id, holder=holder, outcomes=[], now=utc_now())
    assert db.firings.get(key).finished_at is not None  # type: ignore[union-attr]


def _unit(unit: Any) -> int:
    assert unit is not None
    return int(unit.id)


def test_browser_pages_fit_a_phone_375_px_wide(world: World) -> None:
    # A run with what tends to push a page wide: long unbroken words, a relation, a long error.
    url = "https://example.com/" + "very-long-path-segment/" * 8
    (long_id,) = world.store.add_memories("maya", [{"content": f"Read {url}"}], now=utc_now()).ids
    # A word with no place to break at all (a hash, a base64 blob), edited: in its history too.
    blob = "Q" * 600
    (blob_id,) = world.store.add_memories("maya", [{"content": f"Key {blob}"}], now=utc_now()).ids
    world.store.edit(
        "maya", blob_id, {"content": f"Key {blob}!", "tags": [blob[:64]]}, now=utc_now()
    )
    world.store.indexer.sync()
    wide_run = world.store.db.writer.apply(
        "maya",
        "linker",
        [
            CreateRelation(
                source=long_id, target=1, type="related_to", strength=0.8, description=url
            )
        ],
        now=utc_now(),
        info=RecordInfo(
            stats={"dropped": [{"item": f"memory '{url}'", "reason": f"cites {url}"}]},
            error=f"LlmInvalidReply: {url}",
        ),
    ).record_id
    page = world.login(KEY_MAYA)
    page.set_viewport_size({"width": 375, "height": 740})
    pages = {
        "run": f"/ui/runs/{world.run_id}",
        "wide-run": f"/ui/runs/{wide_run}",
        "wide-search": f"/ui/memories?namespace=maya&q={url}",
        "search": "/ui/memories?namespace=maya&q=hiking+in+the+Alps",
        "overnight": "/ui/overnight",
        "status": "/ui/status",
        "memories": "/ui/memories?namespace=maya",
        "blob": f"/ui/memories/maya/{blob_id}",
        "blob-search": "/ui/memories?namespace=maya&q=Key",
    }
    for width in (375, 1280):
        page.set_viewport_size({"width": width, "height": 740})
        for name, path in pages.items():
            page.goto(world.url + path)
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
            wide = page.evaluate("document.scrollingElement.scrollWidth")
            assert wide <= width, f"{name} is {wide} px wide at {width}"
    page.set_viewport_size({"width": 375, "height": 740})
    # A relation's words between its two ends do not run over them (only its arrow turns).
    page.goto(f"{world.url}/ui/runs/{wide_run}")
    boxes = page.evaluate(
        "[...document.querySelectorAll('.side-by-side')].map(s => ["
        "s.querySelector('.from').getBoundingClientRect().bottom,"
        "s.querySelector('.arrow').getBoundingClientRect().top])"
    )
    assert boxes
    assert all(from_bottom <= arrow_top for from_bottom, arrow_top in boxes), boxes
    assert "1 relation created" in page.inner_text("main")
    page.context.close()


def test_browser_search_of_20_hits_fits_about_two_screens(world: World) -> None:
    notes = [
        {"content": f"Maya watered the tomato seedlings in the garden, note {n}."}
        for n in range(25)
    ]
    world.store.add_memories("maya", notes, now=utc_now())
    world.store.indexer.sync()
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/memories?namespace=maya&q=tomato+seedlings+garden")
    assert page.locator("li.hit").count() == 20
    tall = page.evaluate("document.scrollingElement.scrollHeight")
    screenshot(page, "search-20")
    assert tall <= 2 * 900, f"20 hits take {tall} px at 1280x900"
    page.context.close()


def test_browser_scoped_key_cannot_see_or_act_on_another_namespace(world: World) -> None:
    page = world.login(KEY_MAYA)
    zoe = world.store.db.memories.many("zoe", range(1, 100))
    target = next(m for m in zoe if m.status == "active")
    before = list(world.store.db.memories.export("zoe"))
    for path in (
        f"/ui/memories/zoe/{target.id}",
        f"/ui/memories/zoe/{target.id}/forget",
        "/ui/memories?namespace=zoe",
        f"/ui/runs/{world.plan_id}",
    ):
        response = page.goto(world.url + path)
        assert response.status == 404, path
        assert target.content not in page.inner_text("body")
    # A form of maya's, aimed at zoe's memory: the session and token are valid, the namespace not.
    page.goto(f"{world.url}/ui/memories")
    own = page.locator("table.memories a").first.get_attribute("href")
    page.goto(world.url + own)
    page.evaluate(
        "id => { for (const f of document.querySelectorAll('form[action*=\"/ui/memories/\"]'))"
        " f.action = f.action.replace(/memories\\/maya\\/\\d+/, 'memories/zoe/' + id); }",
        target.id,
    )
    with page.expect_navigation() as edited:
        page.fill("textarea[name=content]", "written by maya")
        page.click("form.edit button")
    assert edited.value.status == 404
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    posted = page.context.request.post(
        f"{world.url}/ui/memories/zoe/{target.id}/delete", form={"csrf": token or ""}
    )
    assert posted.status == 404
    assert list(world.store.db.memories.export("zoe")) == before
    page.context.close()


def test_browser_form_without_its_csrf_token_changes_nothing(world: World) -> None:
    page = world.login(KEY_MAYA)
    page.goto(f"{world.url}/ui/memories")
    page.locator("table.memories a").first.click()
    memory_url = page.url
    before = list(world.store.db.memories.export("maya"))
    page.evaluate("document.querySelector('form.edit input[name=csrf]').remove()")
    with page.expect_navigation() as edited:
        page.fill("textarea[name=content]", "changed without a token")
        page.click("form.edit button")
    assert edited.value.status == 403
    assert "nothing was changed" in page.inner_text("main")
    posted = page.context.request.post(memory_url + "/delete", form={"version": "1"})
    assert posted.status == 403
    assert list(world.store.db.memories.export("maya")) == before
    page.context.close()


def test_browser_forget_removes_the_memory_from_every_page(world: World) -> None:
    page = world.login(KEY_MAYA)
    maya = world.store.db.memories.many("maya", range(1, 100))
    target = next(m for m in maya if "electricity" in m.content)
    page.goto(f"{world.url}/ui/memories/maya/{target.id}")
    page.click("text=Forget for good…")
    assert "cannot be undone" in page.inner_text("main")
    screenshot(page, "forget")
    page.click("form button.danger")  # the box is not ticked: the browser refuses to send it
    assert world.store.db.memories.get("maya", target.id) is not None
    page.check("input[name=confirm]")
    page.click("form button.danger")
    page.wait_for_url(re.compile(r".*/ui/memories\?.*said=.*"))
    assert world.store.db.memories.get("maya", target.id) is None
    text = target.content
    pages = [
        "/ui/overnight?every=1",
        f"/ui/runs/{world.run_id}",
        "/ui/memories?namespace=maya",
        "/ui/memories?namespace=maya&q=electricity+bill",
        "/ui/memories?namespace=maya&status=deleted",
        "/ui/plans",
        "/ui/status",
    ]
    for path in pages:
        page.goto(world.url + path)
        assert text not in page.content(), path
    gone = page.goto(f"{world.url}/ui/memories/maya/{target.id}")
    assert gone.status == 404
    runs = [
        r for r in world.store.db.records.find(namespaces=["maya"], limit=100) if r.job != "forget"
    ]
    for record in runs:
        page.goto(f"{world.url}/ui/runs/{record.id}")
        assert text not in page.content(), record.id
    exported = json.dumps(list(world.store.db.memories.export("maya")))
    assert text not in exported
    page.context.close()
