"""Filters pushed into Chroma select exactly what ``SearchFilters.matches`` selects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from store.lexical.source import lexical_docs
from store.reads.search import LexicalRow
from store.requests import SearchFilters
from store.vector.index import IndexItem, VectorIndex
from store.views import MemoryView
from tests.helpers.fake_embedder import FakeEmbedder

MAY = datetime(2023, 5, 7, 13, 56, tzinfo=UTC)


def _memory(memory_id: int, **fields: object) -> MemoryView:
    values: dict[str, object] = {
        "id": memory_id, "namespace": "ns", "external_id": None, "content": "red kite",
        "content_hash": "", "type": "event", "tags": (), "importance": 5, "base_importance": 5.0,
        "access_count": 0, "last_accessed": None, "event_time": MAY, "created_at": MAY,
        "updated_at": MAY, "session_id": None, "prev_id": None, "next_id": None,
        "status": "active", "replaced_by_id": None, "pinned": False, "source": "test",
        "metadata": {}, "version": 1,
    }  # fmt: skip
    values.update(fields)
    return MemoryView(**values)  # type: ignore[arg-type]


MEMORIES = [
    _memory(1, tags=("birds", "walks"), metadata={"channel": "voice", "n": 3}),
    _memory(2, type="fact", tags=("birds",), event_time=MAY + timedelta(days=30)),
    _memory(3, metadata={"ok": True, "nested": {"a": [1, 2]}}, event_time=MAY - timedelta(1)),
    _memory(4, metadata={"channel": "chat"}, event_time=MAY + timedelta(microseconds=1)),
]

CASES = [
    SearchFilters(types=("fact",)),
    SearchFilters(types=("event", "fact")),
    SearchFilters(tags=("birds",)),
    SearchFilters(tags=("birds", "walks")),
    SearchFilters(since=MAY),
    SearchFilters(until=MAY + timedelta(microseconds=1)),
    SearchFilters(since=MAY, until=MAY + timedelta(days=30)),
    SearchFilters(metadata=(("channel", "voice"),)),
    SearchFilters(metadata=(("n", "3"),)),
    SearchFilters(metadata=(("ok", "true"),)),
    SearchFilters(metadata=(("nested", '{"a":[1,2]}'),)),
    SearchFilters(types=("event",), tags=("birds",), metadata=(("channel", "voice"),)),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> VectorIndex:
    opened = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path_factory.mktemp("chroma"))
    opened.upsert("ns", [IndexItem.of(memory) for memory in MEMORIES])
    return opened


@pytest.mark.parametrize("filters", CASES)
def test_query_filters_select_what_sql_selects(index: VectorIndex, filters: SearchFilters) -> None:
    hits = index.query("ns", index.embed_query("red kite"), 10, filters=filters)
    expected = [m.id for m in MEMORIES if filters.matches(m)]
    assert sorted(hit.memory_id for hit in hits) == expected


def test_query_collection_without_filter_fields_is_not_filtered(tmp_path: Path) -> None:
    opened = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    opened.upsert("ns", [IndexItem.of(memory) for memory in MEMORIES])
    collection = opened._collection("ns", create=False)
    assert collection is not None
    older = {k: v for k, v in (collection.metadata or {}).items() if k != "filters"}
    collection.modify(metadata=older)  # as a collection made before vectors carried them
    opened.close()
    reopened = VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path)
    assert not reopened.filterable("ns")
    hits = reopened.query("ns", reopened.embed_query("kite"), 10, filters=CASES[0])
    assert len(hits) == len(MEMORIES)  # the caller widens and filters afterwards
    reopened.close()


def test_lexical_docs_date_in_words_before_content_and_filter_fields() -> None:
    row = LexicalRow(
        memory_id=7, content="hello", event_time=MAY, session_id="s1", version=3,
        type="fact", tags_json='["a"]', metadata_json='{"k": 1}',
    )  # fmt: skip
    (doc,) = lexical_docs([row])
    assert (doc.memory_id, doc.text, doc.session_key) == (7, "7 May 2023 hello", "s1")
    assert (doc.version, doc.type, doc.tags, doc.metadata) == (3, "fact", ("a",), {"k": 1})
