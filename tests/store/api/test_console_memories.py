"""The console's Memories page: its filters as a search and a listing read them (TestClient)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.service import Store
from tests.store.api.test_console import NOW, client, memory_id, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "open")
    yield opened
    opened.close()


def test_console_search_with_a_retired_status_says_it_finds_active_ones_only(
    store: Store,
) -> None:
    tea = memory_id(store, "a", "a: I like tea")
    store.delete("a", tea, now=NOW)
    with client(store) as web:
        searched = web.get("/ui/memories?namespace=a&q=tea&status=deleted").text
        listed = web.get("/ui/memories?namespace=a&status=deleted").text
    # Not the active hits as if they were the deleted ones: the filter cannot apply.
    assert 'class="hit"' not in searched
    assert 'class="memories"' not in searched  # nor an empty listing: "No memories."
    assert "a search finds active memories only" in searched
    assert f'data-memory="{tea}"' in listed
    statuses = re.findall(r'<option value="(\w*)"', searched.split('name="status"')[1])
    assert statuses[: statuses.index("deleted") + 1] == [
        "active",
        "superseded",
        "merged",
        "archived",
        "deleted",
    ]
    assert '<option value="deleted" selected>' in searched
