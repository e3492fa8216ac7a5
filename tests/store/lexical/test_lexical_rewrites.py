"""The lexical index holds no text the store no longer has: after an edit of a memory's text,
an undo of an ingest or a forget (by this process or another), the next search finds it changed;
and the index saved beside the store is brought current by what changed while it was closed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from secretary.config import Settings
from store.lexical.index import LexicalIndex
from store.lexical.source import SqlLexicalSource
from store.operations import UpdateMemory
from store.requests import SearchFilters, search_request
from store.service import Store
from store.settings import LexicalSettings
from store.write import edits
from store.write.forget import ForgetSelection
from store.write.undo import undo
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two stores over one database, as the API and the daemon (or a CLI) are."""
    settings = Settings(data_dir=tmp_path)
    first = Store.open(settings, create=True, embedder=FakeEmbedder())
    second = Store.open(settings, embedder=FakeEmbedder())
    yield first, second
    first.close()
    second.close()


def lexical(store: Store, query: str) -> list[int]:
    view = store.searcher.lexical_view("ns")
    return sorted(view.search(query, 10, None))


def test_an_edit_elsewhere_rebuilds_the_lexical_index(two: tuple[Store, Store]) -> None:
    api, daemon = two
    ids = api.add_memories(
        "ns",
        [{"content": "walked the dog to the lighthouse"}, {"content": "bought a bike"}],
        now=NOW,
    ).ids
    assert lexical(api, "lighthouse") == [ids[0]]

    daemon.db.writer.apply(
        "ns",
        "auditor",
        [UpdateMemory(memory_id=ids[0], changes={"content": "fed the cat"})],
        now=NOW,
    )
    assert lexical(api, "lighthouse") == []
    assert lexical(api, "cat") == [ids[0]]


def test_an_undone_ingest_and_a_forget_leave_no_text_behind(two: tuple[Store, Store]) -> None:
    api, cli = two
    kept = api.add_memories("ns", [{"content": "bought a bike"}], now=NOW).ids
    added = api.add_memories("ns", [{"content": "secret lighthouse keeper"}], now=NOW)
    assert lexical(api, "lighthouse") == list(added.ids)
    undo(cli.db.writer, added.record_id, now=NOW)  # type: ignore[arg-type]
    assert lexical(api, "lighthouse") == []

    assert lexical(api, "bike") == list(kept)
    edits.forget(cli.db.writer, "ns", ForgetSelection(ids=kept), now=NOW)
    assert lexical(api, "bike") == []
    assert api.search(search_request(namespace="ns", query="bike"), now=NOW).hits == ()


def test_new_memories_alone_extend_the_index_without_a_rebuild(two: tuple[Store, Store]) -> None:
    api, daemon = two
    api.add_memories("ns", [{"content": "bought a bike"}], now=NOW)
    assert lexical(api, "bike")
    assert (api.lexical.builds, api.lexical.merges) == (1, 0)
    (new,) = daemon.add_memories("ns", [{"content": "rode the bike home"}], now=NOW).ids
    assert new in lexical(api, "bike")
    assert (api.lexical.builds, api.lexical.merges) == (1, 0)
    assert api.searcher.lexical_view("ns").tail_size == 1


def test_an_undone_undo_brings_the_memory_back_under_its_old_id(two: tuple[Store, Store]) -> None:
    api, cli = two
    api.add_memories("ns", [{"content": "bought a bike"}], now=NOW)
    added = api.add_memories("ns", [{"content": "the lighthouse keeper"}], now=NOW)
    assert lexical(api, "lighthouse") == list(added.ids)  # the index has seen its id
    undone = undo(cli.db.writer, added.record_id, now=NOW)  # type: ignore[arg-type]
    assert lexical(api, "lighthouse") == []
    undo(cli.db.writer, undone.record_id, now=NOW)
    assert lexical(api, "lighthouse") == list(added.ids)


def test_a_changed_tag_reaches_the_filters_of_the_index(two: tuple[Store, Store]) -> None:
    api, daemon = two
    (memory_id,) = api.add_memories("ns", [{"content": "red kite", "tags": ["a"]}], now=NOW).ids
    birds = SearchFilters(tags=("birds",))
    assert api.searcher.lexical_view("ns").search("kite", 5, filters=birds) == {}
    daemon.edit("ns", memory_id, {"tags": ["birds"]}, now=NOW)
    assert list(api.searcher.lexical_view("ns").search("kite", 5, filters=birds)) == [memory_id]


# -- saved beside the store --------------------------------------------------------------------


def _settings(data_dir: Path, **lexical: Any) -> Settings:
    return Settings(data_dir=data_dir, lexical=LexicalSettings(**lexical))


def test_the_saved_index_is_brought_current_after_a_restart(tmp_path: Path) -> None:
    first = Store.open(_settings(tmp_path), create=True, embedder=FakeEmbedder())
    ids = first.add_memories(
        "ns",
        [{"content": text} for text in ("bought a bike", "fed the cat", "a secret lighthouse")],
        now=NOW,
    ).ids
    assert lexical(first, "bike") == [ids[0]]
    first.close()

    # While no server runs, a CLI writes: a new memory, an edit, a delete and a forget.
    cli = Store.open(_settings(tmp_path), embedder=FakeEmbedder())
    (new,) = cli.add_memories("ns", [{"content": "rode the bike home"}], now=NOW).ids
    cli.edit("ns", ids[1], {"content": "fed the parrot"}, now=NOW)
    cli.delete("ns", ids[0], now=NOW)
    cli.forget("ns", ForgetSelection(ids=(ids[2],)), now=NOW, by="test")
    cli.close()

    restarted = Store.open(_settings(tmp_path, max_tail=0), embedder=FakeEmbedder())
    try:
        assert lexical(restarted, "bike") == [new]
        assert lexical(restarted, "cat") == []
        assert lexical(restarted, "parrot") == [ids[1]]
        assert lexical(restarted, "lighthouse") == []
        assert restarted.lexical.builds == 0
        view = restarted.searcher.lexical_view("ns")
        source = SqlLexicalSource(restarted.db.search)
        fresh = LexicalIndex.build(source.all_docs("ns"))
        for query in ("bike home", "parrot", "fed the bike"):
            assert view.search(query, 10) == fresh.search(query, 10)
    finally:
        restarted.close()


def test_without_persistence_nothing_is_saved(tmp_path: Path) -> None:
    store = Store.open(_settings(tmp_path, persist=False), create=True, embedder=FakeEmbedder())
    try:
        store.add_memories("ns", [{"content": "bought a bike"}], now=NOW)
        assert lexical(store, "bike")
    finally:
        store.close()
    assert not (tmp_path / "lexical").exists()
