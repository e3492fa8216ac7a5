"""The console's edit form sent back as a browser sends it: saved unchanged, a field emptied,
metadata shown as it is (TestClient)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from store.service import Store
from tests.store.api.test_console import NOW, client, memory_id, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "open")
    yield opened
    opened.close()


def shown_form(page: str) -> dict[str, str]:
    """The edit form's fields as a browser would send them untouched."""
    form = page[page.index('action="/ui/memories/a/') : page.index("</form>")]
    fields = {
        name: html.unescape(value)
        for name, value in re.findall(r'<input[^>]*name="(\w+)"[^>]*value="([^"]*)"', form)
        if name != "pinned"
    }
    if re.search(r'name="pinned" value="yes" checked', form):
        fields["pinned"] = "yes"
    for name, text in re.findall(r'<textarea[^>]*name="(\w+)"[^>]*>(.*?)</textarea>', form, re.S):
        fields[name] = html.unescape(text)
    return fields


def edit(web: TestClient, tea: int, **changed: str) -> tuple[int, str]:
    """Send the form as shown with ``changed`` fields; return the status and the page after."""
    fields = shown_form(web.get(f"/ui/memories/a/{tea}").text) | changed
    response = web.post(f"/ui/memories/a/{tea}/edit", data=fields)
    return response.status_code, response.text


def test_console_form_saved_as_shown_says_nothing_changed_and_records_nothing(
    store: Store,
) -> None:
    tea = memory_id(store, "a", "a: I like tea")
    store.edit("a", tea, {"metadata": {"note": "<b>strong</b> & more"}, "tags": ["x"]}, now=NOW)
    records = len(store.db.records.find())
    with client(store) as web:
        page = web.get(f"/ui/memories/a/{tea}").text
        assert "\\u003c" not in page  # metadata shown as written, escaped for HTML only
        assert "&lt;b&gt;strong&lt;/b&gt; &amp; more" in page
        status, after = edit(web, tea)
    assert status == 200
    assert "nothing changed" in after
    assert 'class="error"' not in after
    assert len(store.db.records.find()) == records


def test_console_metadata_emptied_is_cleared(store: Store) -> None:
    tea = memory_id(store, "a", "a: I like tea")
    store.edit("a", tea, {"metadata": {"note": "x"}}, now=NOW)
    with client(store) as web:
        status, _ = edit(web, tea, metadata="  ")
    assert status == 200
    memory = store.db.memories.get("a", tea)
    assert memory is not None
    assert dict(memory.metadata) == {}


@pytest.mark.parametrize("name", ["type", "importance", "event_time"])
def test_console_required_field_emptied_is_refused_and_changes_nothing(
    store: Store, name: str
) -> None:
    tea = memory_id(store, "a", "a: I like tea")
    before = store.db.memories.get("a", tea)
    with client(store) as web:
        status, page = edit(web, tea, **{name: "", "content": "a: I like coffee"})
    assert status == 422
    assert f"{name}: cannot be empty" in page
    assert store.db.memories.get("a", tea) == before


def test_console_form_opened_before_a_pin_is_refused_and_a_cleared_box_unpins(
    store: Store,
) -> None:
    # A form shown before the memory was pinned must not take the pin back with its unticked
    # box: a pin is a new version, so the form is stale.
    tea = memory_id(store, "a", "a: I like tea")
    with client(store) as web:
        stale = shown_form(web.get(f"/ui/memories/a/{tea}").text)
        store.edit("a", tea, {"pinned": True}, now=NOW)  # in another tab
        response = web.post(
            f"/ui/memories/a/{tea}/edit", data=stale | {"content": "a: I like green tea"}
        )
        assert response.status_code == 409
        kept = store.db.memories.get("a", tea)
        assert kept is not None
        assert (kept.content, kept.pinned) == ("a: I like tea", True)
        unpinned = shown_form(web.get(f"/ui/memories/a/{tea}").text)
        unpinned.pop("pinned")
        assert web.post(f"/ui/memories/a/{tea}/edit", data=unpinned).status_code == 200
    memory = store.db.memories.get("a", tea)
    assert memory is not None
    assert not memory.pinned  # a box cleared on a form that showed it ticked still unpins
