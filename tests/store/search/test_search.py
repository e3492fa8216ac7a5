"""End-to-end tests of search over a real store: SQLite, embedded Chroma and the ONNX embedder."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from secretary.config import Settings
from store.kinds import MemoryStatus
from store.lexical import source as lexical_source
from store.operations import SetStatus
from store.reads.search import SearchReads, SearchRow
from store.requests import SearchFilters, SearchRequest, metadata_equals
from store.search import ranking as ranking_module
from store.search import searcher as search_module
from store.search.scoring import Period
from store.search.searcher import (
    VECTOR_RETRY_SECONDS,
    Evidence,
    Searcher,
    SearchResult,
    Seen,
    rank,
)
from store.service import Store
from store.settings import IndexSettings, RetrievalSettings
from store.vector.embedder import OnnxMiniLMEmbedder
from store.vector.index import VectorHit, VectorIndex, VectorIndexError
from store.views import Edge

NOW = datetime(2023, 7, 1, 12, 0, tzinfo=UTC)
MAY = datetime(2023, 5, 7, 13, 56, tzinfo=UTC)
JUNE = datetime(2023, 6, 20, 9, 0, tzinfo=UTC)
NS = "ns"

CORPUS: list[dict[str, Any]] = [
    {"content": "Caroline: I went to an LGBTQ support group and it was so powerful.",
     "timestamp": MAY, "session_id": "s1", "tags": ["people"]},
    {"content": "Melanie: I painted a lake sunrise last year.",
     "timestamp": MAY, "session_id": "s1", "tags": ["art", "home"]},
    {"content": "The router configuration changed on the office network.", "type": "fact",
     "timestamp": JUNE, "session_id": "s2", "metadata": {"area": "NETWORK", "urgent": True}},
    {"content": "The router configuration changed on the guest network.", "type": "fact",
     "timestamp": JUNE, "session_id": "s2", "metadata": {"area": "NETWORK_CONFIG", "retries": 3}},
    {"content": "The router configuration changed on the lab network.", "type": "fact",
     "timestamp": JUNE, "session_id": "s2", "metadata": {"area": "networking"}},
    {"content": "Melanie: We adopted a puppy last week, what should we call her?",
     "timestamp": JUNE, "session_id": "s3", "tags": ["home"]},
    {"content": "Caroline: Call her Biscuit, it suits a golden coat.",
     "timestamp": JUNE, "session_id": "s3", "tags": ["home"]},
    {"content": "Melanie: I am reading a novel about sailing around the world.",
     "timestamp": JUNE, "session_id": "s3"},
]  # fmt: skip


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(batch_size=16, threads=2)


def _open(data_dir: Path, embedder: OnnxMiniLMEmbedder, **index: Any) -> Store:
    settings = Settings(data_dir=data_dir, index=IndexSettings(**index))
    return Store.open(settings, create=True, embedder=embedder)


@pytest.fixture(scope="module")
def store(
    tmp_path_factory: pytest.TempPathFactory, embedder: OnnxMiniLMEmbedder
) -> Iterator[Store]:
    """One indexed store for the read-only tests of this module."""
    opened = _open(tmp_path_factory.mktemp("search"), embedder)
    opened.add_memories(NS, CORPUS, now=NOW)
    opened.indexer.sync()
    yield opened
    opened.close()


@pytest.fixture
def fresh(tmp_path: Path, embedder: OnnxMiniLMEmbedder) -> Iterator[Store]:
    """A store of its own, for tests that change it."""
    opened = _open(tmp_path, embedder)
    yield opened
    opened.close()


def _search(store: Store, query: str, **fields: Any) -> SearchResult:
    return store.searcher.search(SearchRequest(namespace=NS, query=query, **fields), now=NOW)


def _contents(result: SearchResult) -> list[str]:
    return [hit.memory.content for hit in result.hits]


def archive(store: Store, memory_id: int) -> None:
    """Archive one memory in a record of its own, as a maintenance job would."""
    op = SetStatus(memory_id=memory_id, status=MemoryStatus.ARCHIVED)
    store.db.writer.apply(NS, "test", [op], now=NOW)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


# -- SQL is the truth --------------------------------------------------------------------------


def test_search_memory_archived_before_index_sync_never_returned(fresh: Store) -> None:
    ids = fresh.add_memories(NS, CORPUS[:2], now=NOW).ids
    fresh.indexer.sync()
    assert _contents(_search(fresh, "LGBTQ support group"))[0] == CORPUS[0]["content"]
    archive(fresh, ids[0])
    assert fresh.db.work.outbox_size() == 1  # the index still holds its vectors
    result = _search(fresh, "LGBTQ support group")
    assert ids[0] not in {hit.memory.id for hit in result.hits}
    assert result.hits  # the other memory is still found


def test_search_memory_archived_before_first_sync_never_returned(fresh: Store) -> None:
    ids = fresh.add_memories(NS, CORPUS[:2], now=NOW).ids
    _search(fresh, "support group")  # the lexical cache now holds both memories
    archive(fresh, ids[0])
    fresh.indexer.sync()
    assert ids[0] not in {hit.memory.id for hit in _search(fresh, "LGBTQ support group").hits}


def test_search_chroma_unreachable_lexical_only_and_degraded(
    tmp_path: Path, embedder: OnnxMiniLMEmbedder
) -> None:
    down = _open(tmp_path, embedder, chroma_url=f"http://127.0.0.1:{_closed_port()}")
    down.add_memories(NS, CORPUS, now=NOW)
    result = _search(down, "LGBTQ support group")
    down.close()
    assert result.degraded
    assert result.degraded[0].startswith("vector index unavailable")
    assert _contents(result)[0] == CORPUS[0]["content"]
    assert all(hit.breakdown.dense == 0.0 for hit in result.hits)


def test_search_vector_index_failing_skipped_until_retry_time(
    fresh: Store, embedder: OnnxMiniLMEmbedder
) -> None:
    fresh.add_memories(NS, CORPUS, now=NOW)
    fresh.indexer.sync()
    opened: list[int] = []
    clock = [1000.0]

    def broken_index() -> Any:
        opened.append(1)
        raise VectorIndexError("cannot reach the Chroma server")

    searcher = Searcher(
        reads=fresh.db.search,
        memories=fresh.db.memories,
        index=broken_index,
        lexical=fresh.lexical,
        settings=fresh.settings.retrieval,
        monotonic=lambda: clock[0],
    )
    request = SearchRequest(namespace=NS, query="LGBTQ support group")
    for _ in range(3):
        result = searcher.search(request, now=NOW)
        assert result.degraded == ("vector index unavailable: cannot reach the Chroma server",)
        assert _contents(result)[0] == CORPUS[0]["content"]
    assert len(opened) == 1  # one failure, then lexical answers without trying again
    clock[0] += VECTOR_RETRY_SECONDS
    searcher.search(request, now=NOW)
    assert len(opened) == 2


class _SlowIndex:
    """The store's vector index, whose query waits (up to 10 s) until ``released`` is set."""

    def __init__(self, index: VectorIndex, released: threading.Event) -> None:
        self._index = index
        self._released = released
        self.waited: list[bool] = []  # per query: whether it was released before the timeout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def query(self, *args: Any, **kwargs: Any) -> list[VectorHit]:
        self.waited.append(self._released.wait(timeout=10))
        return self._index.query(*args, **kwargs)


class _CountingReads:
    """SearchReads that set ``read`` on the first rows read and count every id asked for."""

    def __init__(self, reads: SearchReads) -> None:
        self._reads = reads
        self.read = threading.Event()
        self.asked: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reads, name)

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        wanted = list(ids)
        self.asked.extend(wanted)
        self.read.set()
        return self._reads.search_rows(namespace, wanted)


def test_search_reads_the_lexical_rows_while_the_vector_query_runs(store: Store) -> None:
    reads = _CountingReads(store.db.search)
    index = _SlowIndex(store.index, released=reads.read)
    searcher = Searcher(
        reads=reads,  # type: ignore[arg-type]
        memories=store.db.memories,
        index=lambda: index,  # type: ignore[arg-type, return-value]
        lexical=store.lexical,
        settings=store.settings.retrieval,
    )
    request = SearchRequest(
        namespace=NS, query="Which network did the router configuration change?"
    )
    try:
        beside = searcher.search(request, now=NOW)
    finally:
        searcher.close()
    # The vector query could only answer once SQL had been asked for the lexical candidates'
    # rows: the two ran at the same time, and the answer is the usual one.
    assert index.waited == [True]
    assert [hit.memory.id for hit in beside.hits] == [
        hit.memory.id for hit in store.searcher.search(request, now=NOW).hits
    ]
    assert beside.hits[0].breakdown.dense > 0
    assert len(reads.asked) == len(set(reads.asked))  # each row is read once per search


def test_search_vector_query_failing_beside_answers_lexically(store: Store) -> None:
    class ClosedIndex(_SlowIndex):
        def query(self, *args: Any, **kwargs: Any) -> list[VectorHit]:
            raise VectorIndexError("the Chroma server closed the connection")

    index = ClosedIndex(store.index, released=threading.Event())
    searcher = Searcher(
        reads=store.db.search,
        memories=store.db.memories,
        index=lambda: index,  # type: ignore[arg-type, return-value]
        lexical=store.lexical,
        settings=store.settings.retrieval,
    )
    try:
        result = searcher.search(SearchRequest(namespace=NS, query="LGBTQ support group"), now=NOW)
    finally:
        searcher.close()
    assert result.degraded == ("vector index unavailable: the Chroma server closed the connection",)
    assert _contents(result)[0] == CORPUS[0]["content"]
    assert all(hit.breakdown.dense == 0.0 for hit in result.hits)


# -- filters -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "expected_area"),
    [
        (("area", "NETWORK"), "NETWORK"),
        (("area", "NETWORK_CONFIG"), "NETWORK_CONFIG"),
        (("area", "networking"), "networking"),
        (("urgent", "true"), "NETWORK"),
        (("retries", "3"), "NETWORK_CONFIG"),
    ],
)
def test_search_metadata_filter_exact_value_only(
    store: Store, pair: tuple[str, str], expected_area: str
) -> None:
    result = _search(store, "router configuration network", filters=SearchFilters(metadata=(pair,)))
    assert [hit.memory.metadata["area"] for hit in result.hits] == [expected_area]


def test_search_metadata_filter_missing_key_matches_nothing(store: Store) -> None:
    filters = SearchFilters(metadata=(("owner", "NETWORK"),))
    assert _search(store, "router configuration", filters=filters).hits == ()


def test_search_type_filter_only_that_type(store: Store) -> None:
    result = _search(store, "network", filters=SearchFilters(types=("fact",)))
    assert len(result.hits) == 3
    assert {hit.memory.type for hit in result.hits} == {"fact"}


def test_search_tags_filter_requires_all_tags(store: Store) -> None:
    result = _search(store, "painting sunrise puppy", filters=SearchFilters(tags=("home", "art")))
    assert _contents(result) == [CORPUS[1]["content"]]


def test_search_time_filter_since_inclusive_until_exclusive(store: Store) -> None:
    may_only = SearchFilters(since=MAY, until=JUNE)
    result = _search(store, "router Melanie Caroline", filters=may_only)
    assert {hit.memory.event_time for hit in result.hits} == {MAY}
    assert len(result.hits) == 2


@pytest.mark.parametrize(
    ("many", "old_collection"),
    [(False, False), (True, False), (True, True)],
    ids=["selective", "not-selective", "not-selective-old-collection"],
)
def test_search_rare_filter_match_found_however_far_down_it_ranks(
    tmp_path: Path,
    embedder: OnnxMiniLMEmbedder,
    many: bool,
    old_collection: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(
        data_dir=tmp_path, retrieval=RetrievalSettings(dense_candidates=2, lexical_candidates=2)
    )
    opened = Store.open(settings, create=True, embedder=embedder)
    routers = [
        {
            "content": f"The router configuration changed on network {i}.",
            "metadata": {"area": "NET"},
        }
        for i in range(30)
    ]
    printer = {
        "content": "The printer on the second floor ran out of toner.",
        "metadata": {"area": "PRINT"},
    }
    ids = opened.add_memories(NS, [*routers, printer], now=NOW).ids
    if old_collection:  # made before vectors carried what filters read: it cannot filter
        monkeypatch.setattr(VectorIndex, "filterable", lambda self, namespace: False)
    opened.indexer.sync()
    if many:  # as if far more memories passed: the indexes apply the filter themselves
        monkeypatch.setattr(search_module, "FILTER_CANDIDATES", 0)
    filters = SearchFilters(metadata=(("area", "PRINT"),))
    result = _search(opened, "router configuration network", filters=filters)
    opened.close()
    # Both indexes apply the filter, except an old collection: its widened pool (8) cannot
    # reach the one match, which shares no word with the query either.
    assert [hit.memory.id for hit in result.hits] == ([] if old_collection else [ids[-1]])


# -- ranking -----------------------------------------------------------------------------------


def test_search_spreading_adds_timeline_neighbour_without_match(store: Store) -> None:
    narrow = store.settings.retrieval.model_copy(
        update={"dense_candidates": 1, "lexical_candidates": 1, "spread_seeds": 1}
    )
    searcher = Searcher(
        reads=store.db.search, memories=store.db.memories, index=lambda: store.index,
        lexical=store.lexical, settings=narrow,
    )  # fmt: skip
    request = SearchRequest(namespace=NS, query="adopted puppy")
    hits = searcher.search(request, now=NOW).hits
    searcher.close()
    assert hits[0].memory.content == CORPUS[5]["content"]
    neighbour = {hit.memory.content: hit for hit in hits}[CORPUS[6]["content"]]
    assert neighbour.via == "spread"
    assert neighbour.breakdown.lexical == 0.0
    assert neighbour.breakdown.dense == 0.0
    assert neighbour.breakdown.activation == pytest.approx(hits[0].breakdown.match)


@pytest.mark.parametrize("context", [0.0, 0.8])
def test_search_reply_found_lexically_by_the_turn_it_answers(store: Store, context: float) -> None:
    settings = store.settings.retrieval.model_copy(update={"lexical_context": context})
    searcher = Searcher(
        reads=store.db.search, memories=store.db.memories, index=lambda: store.index,
        lexical=store.lexical, settings=settings,
    )  # fmt: skip
    hits = searcher.search(SearchRequest(namespace=NS, query="adopted puppy"), now=NOW).hits
    searcher.close()
    by_content = {hit.memory.content: hit for hit in hits}
    question, reply = by_content[CORPUS[5]["content"]], by_content[CORPUS[6]["content"]]
    assert hits[0] is question
    assert question.breakdown.lexical == 1.0
    if context:  # "Call her Biscuit" holds no word of the query; the turn it answers does
        assert 0.0 < reply.breakdown.lexical < 1.0
    else:
        assert reply.breakdown.lexical == 0.0


def test_search_k_limits_hits(store: Store) -> None:
    assert len(_search(store, "router network", k=2).hits) == 2
    assert _search(store, "router network", k=0).hits == ()


def test_search_min_score_answers_nothing_unless_a_hit_is_that_relevant(store: Store) -> None:
    everything = _search(store, "router configuration network", min_score=0.0)
    best = max(hit.breakdown.relevance for hit in everything.hits)
    assert 0.0 < best < 1.0
    # At or below the best hit's relevance: the same hits, in the same order.
    kept = _search(store, "router configuration network", min_score=best)
    assert [h.memory.id for h in kept.hits] == [h.memory.id for h in everything.hits]
    # Above it: nothing is relevant enough, so nothing is returned.
    assert _search(store, "router configuration network", min_score=best + 1e-6).hits == ()


def test_search_breakdown_terms_sum_to_score(store: Store) -> None:
    s = store.settings.retrieval
    result = _search(store, "What did Melanie paint last year?")
    assert result.hits
    for hit in result.hits:
        b = hit.breakdown
        parts = (
            s.w_lexical * b.lexical + s.w_dense * b.dense + s.w_session * b.session
            + s.w_period * b.period
        )  # fmt: skip
        terms = s.w_sim * b.match + s.w_imp * b.importance + s.w_rec * b.recency
        assert b.match == pytest.approx(parts)
        assert hit.score == b.score == pytest.approx(terms + s.w_act * b.activation)
        assert 0.0 < b.relevance < 1.0
        assert set(b.as_dict()) >= {"relevance", "match", "importance", "recency", "activation"}


def test_search_hits_best_first_and_relevant_on_top(store: Store) -> None:
    result = _search(store, "What did Melanie paint?")
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert result.hits[0].memory.content == CORPUS[1]["content"]
    assert result.degraded == ()


def test_search_other_namespace_never_returned(store: Store) -> None:
    request = SearchRequest(namespace="elsewhere", query="router configuration")
    assert store.searcher.search(request, now=NOW).hits == ()


def test_search_lexical_index_read_page_by_page_holds_every_memory(
    fresh: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexical_source, "LEXICAL_PAGE", 3)
    fresh.add_memories(NS, CORPUS, now=NOW)  # not indexed: search is lexical only
    assert len(fresh.searcher.lexical_view(NS)) == len(CORPUS)
    assert _contents(_search(fresh, "sailing novel"))[0] == CORPUS[-1]["content"]
    assert _contents(_search(fresh, "LGBTQ support group"))[0] == CORPUS[0]["content"]


# -- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "wanted", "equal"),
    [
        ("NETWORK", "NETWORK", True),
        ("NETWORK_CONFIG", "NETWORK", False),
        ("networking", "NETWORK", False),
        (True, "true", True),
        (3, "3", True),
        (3, "3.0", False),
        (None, "null", True),
        ({"b": 1, "a": [1, 2]}, '{"a":[1,2],"b":1}', True),
    ],
)
def test_metadata_equals_whole_value_json_text(stored: object, wanted: str, equal: bool) -> None:
    assert metadata_equals({"key": stored}, "key", wanted) is equal


class ChainSource:
    """Memories 1..n linked only by the timeline, held in memory: one session by default, or
    no sessions with events ``apart`` from each other, or ``sessions`` taken in turn; ``gone``
    ones are not active. ``read`` lists every id asked for."""

    def __init__(
        self,
        n: int,
        *,
        session: str | None = "s",
        apart: timedelta = timedelta(days=1),
        sessions: Sequence[str | None] = (),
        gone: Iterable[int] = (),
    ) -> None:
        missing = set(gone)
        self.rows = {
            i: SearchRow(
                id=i,
                type="event",
                tags_json="[]",
                metadata_json="{}",
                event_time=NOW - i * apart,
                session_id=sessions[i % len(sessions)] if sessions else session,
                prev_id=i - 1 if i > 1 else None,
                next_id=i + 1 if i < n else None,
                base_importance=5.0,
                pinned=False,
            )
            for i in range(1, n + 1)
            if i not in missing
        }
        self.read: list[int] = []

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        wanted = list(ids)
        self.read.extend(wanted)
        return {i: self.rows[i] for i in wanted if i in self.rows}

    def edges(self, namespace: str, ids: Iterable[int]) -> Sequence[Edge]:
        return []


def test_rank_scores_a_replacement_in_the_sessions_of_what_it_replaced() -> None:
    source = ChainSource(3, session="later")
    source.rows[2].replaced = frozenset({"earlier"})  # memory 2 superseded a fact said earlier
    settings = RetrievalSettings(spread_depth=0)
    evidence = Evidence(
        lexical={1: 1.0, 2: 1.0, 3: 1.0},
        sessions={"earlier": 1.0, "later": 0.25},
        hits=(),
        periods=(),
    )
    ranked = rank(evidence, source, SearchRequest(namespace=NS, query="q"), settings, now=NOW)
    sessions = {item.memory_id: item.breakdown.session for item in ranked}
    assert sessions == {1: 0.25, 2: 1.0, 3: 0.25}
    assert ranked[0].memory_id == 2


@pytest.mark.parametrize(("exponent", "first"), [(1.0, 2), (2.0, 1)])
def test_rank_lexical_exponent_sharpens_partial_bm25_matches(exponent: float, first: int) -> None:
    # Memory 1 matches the query's words best; memory 2 matches some of them and is nearer in
    # the vector space. Divided by the best BM25 alone, the partial match wins on the sum.
    settings = RetrievalSettings(spread_depth=0, w_lexical=1.0, lexical_exponent=exponent)
    evidence = Evidence(
        lexical={1: 1.0, 2: 0.6},
        sessions={},
        hits=(VectorHit(memory_id=2, similarity=0.9), VectorHit(memory_id=1, similarity=0.6),
              VectorHit(memory_id=3, similarity=0.3)),
        periods=(),
    )  # fmt: skip
    request = SearchRequest(namespace=NS, query="q")
    ranked = rank(evidence, ChainSource(3, session=None), request, settings, now=NOW)
    lexical = {item.memory_id: item.breakdown.lexical for item in ranked}
    assert lexical[1] == 1.0
    assert lexical[2] == pytest.approx(0.6**exponent)
    assert ranked[0].memory_id == first


@pytest.mark.parametrize(("depth", "reached"), [(0, [1]), (1, [1, 2]), (2, [1, 2, 3])])
def test_rank_spread_depth_bounds_reach(depth: int, reached: list[int]) -> None:
    settings = RetrievalSettings(spread_depth=depth, spread_fanout=2)
    evidence = Evidence(lexical={1: 1.0}, sessions={}, hits=(), periods=())
    request = SearchRequest(namespace=NS, query="m1")
    ranked = rank(evidence, ChainSource(6), request, settings, now=NOW)
    assert sorted(item.memory_id for item in ranked) == reached
    assert [item.via for item in ranked if item.memory_id != 1] == ["spread"] * (len(reached) - 1)


@pytest.mark.parametrize(
    ("apart", "reached"),
    [(timedelta(minutes=10), [1, 2, 3]), (timedelta(days=40), [1])],
    ids=["minutes-apart", "months-apart"],
)
def test_rank_timeline_without_sessions_spreads_only_close_in_time(
    apart: timedelta, reached: list[int]
) -> None:
    # A diary of unrelated events months apart: a neighbour is not evidence of anything.
    settings = RetrievalSettings(spread_depth=2, spread_fanout=2, timeline_window_minutes=60)
    evidence = Evidence(lexical={1: 1.0}, sessions={}, hits=(), periods=())
    request = SearchRequest(namespace=NS, query="m1")
    ranked = rank(evidence, ChainSource(6, session=None, apart=apart), request, settings, now=NOW)
    assert sorted(item.memory_id for item in ranked) == reached


def test_rank_spread_memory_never_outranks_a_relevant_anchor() -> None:
    # Memory 2 has no relevance of its own; the strong anchor 1 passes it a lot of activation,
    # but it may not rank above the weak anchor 5, which matches the query.
    settings = RetrievalSettings(spread_depth=1, spread_fanout=2, w_act=5.0)
    source = ChainSource(6)
    source.rows[5] = replace(source.rows[5], prev_id=None, next_id=None, session_id="other")
    source.rows[4] = replace(source.rows[4], next_id=None)
    evidence = Evidence(lexical={1: 1.0, 5: 0.05}, sessions={}, hits=(), periods=())
    request = SearchRequest(namespace=NS, query="m1", k=3)
    ranked = rank(evidence, source, request, settings, now=NOW)
    order = [item.memory_id for item in ranked]
    assert order[0] == 1
    assert set(order) == {1, 2, 5}
    assert order.index(5) < order.index(2)
    spread = next(item for item in ranked if item.memory_id == 2)
    assert spread.via == "spread"
    assert spread.breakdown.activation > 0


_unit = st.floats(min_value=0.0, max_value=1.0)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=60),
    data=st.data(),
    anchors=st.integers(min_value=1, max_value=12),
    weights=st.tuples(_unit, _unit, _unit, _unit),
    period=st.booleans(),
)
def test_rank_reads_only_dense_candidates_that_may_be_anchors_and_ranks_the_same(
    n: int,
    data: st.DataObject,
    anchors: int,
    weights: tuple[float, float, float, float],
    period: bool,
) -> None:
    ids = st.integers(min_value=1, max_value=n)
    lexical = data.draw(st.dictionaries(ids, _unit, max_size=n))
    nearest = data.draw(st.dictionaries(ids, st.floats(min_value=-1, max_value=1), max_size=n))
    sessions = data.draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=4))
    scores = data.draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), _unit))
    source = ChainSource(n, sessions=sessions, gone=data.draw(st.sets(ids, max_size=n // 3)))
    hits = [
        VectorHit(memory_id=m, similarity=s)
        for m, s in sorted(nearest.items(), key=lambda h: -h[1])
    ]
    spans = (Period(start=NOW - timedelta(days=n // 2), end=NOW),) if period else ()
    # A chat's second reading (the excerpt as given), with its own evidence and weight.
    also = tuple(
        Seen(
            lexical=data.draw(st.dictionaries(ids, _unit, max_size=n)),
            sessions=data.draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), _unit)),
            hits=[
                VectorHit(memory_id=m, similarity=s)
                for m, s in sorted(
                    data.draw(
                        st.dictionaries(ids, st.floats(min_value=-1, max_value=1), max_size=n)
                    ).items(),
                    key=lambda h: -h[1],
                )
            ],
            weight=data.draw(_unit),
        )
        for _ in range(data.draw(st.integers(min_value=0, max_value=2)))
    )
    evidence = Evidence(lexical=lexical, sessions=scores, hits=hits, periods=spans, also=also)
    w_lexical, w_dense, w_session, w_period = weights
    config = RetrievalSettings(
        anchors=anchors, w_lexical=w_lexical, w_dense=w_dense, w_session=w_session,
        w_period=w_period, spread_seeds=min(anchors, 5),
    )  # fmt: skip
    request = SearchRequest(namespace=NS, query="q", k=10)
    pruned = rank(evidence, source, request, config, now=NOW)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranking_module, "worth_reading", lambda known, others, *a, **k: list(others))
        every = rank(evidence, source, request, config, now=NOW)
    assert [(r.memory_id, r.score, r.via) for r in pruned] == [
        (r.memory_id, r.score, r.via) for r in every
    ]


def test_rank_with_a_vanishing_dense_weight_and_a_chat_reading_prunes_exactly() -> None:
    # Found by the property above: a subnormal w_dense made the excerpt reading's scale
    # overflow (inf x 0 = nan), and pruning then changed the ranking.
    source = ChainSource(10, sessions=["a"])
    lexical = {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 9: 1.0, 10: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}
    also = (Seen(lexical={1: 1.0}, sessions={}, hits=[], weight=1.0),)
    evidence = Evidence(lexical=lexical, sessions={}, hits=[VectorHit(memory_id=8, similarity=0.0)],
                        periods=(), also=also)  # fmt: skip
    config = RetrievalSettings(anchors=8, w_lexical=1.0, w_dense=5e-324, w_session=0.0,
                               w_period=0.0, spread_seeds=5)  # fmt: skip
    request = SearchRequest(namespace=NS, query="q", k=10)
    pruned = rank(evidence, source, request, config, now=NOW)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranking_module, "worth_reading", lambda known, others, *a, **k: list(others))
        every = rank(evidence, source, request, config, now=NOW)
    assert [(r.memory_id, r.score, r.via) for r in pruned] == [
        (r.memory_id, r.score, r.via) for r in every
    ]


def test_rank_leaves_unread_the_dense_candidates_that_cannot_be_anchors() -> None:
    source = ChainSource(60, session=None)
    # Memories 1-20 match the words well; all 60 are among the nearest vectors, 60 the least.
    lexical = {i: 1.0 - i / 100 for i in range(1, 21)}
    hits = [VectorHit(memory_id=i, similarity=1.0 - i / 60) for i in range(1, 61)]
    evidence = Evidence(lexical=lexical, sessions={}, hits=hits, periods=())
    config = RetrievalSettings(anchors=5, spread_depth=0)
    ranked = rank(evidence, source, SearchRequest(namespace=NS, query="q", k=5), config, now=NOW)
    assert [r.memory_id for r in ranked] == [1, 2, 3, 4, 5]
    # The 5th best lexical memory's lexical and dense parts alone outweigh whatever a dense-only
    # memory could reach (no session or period scored): none of 21-60 was read.
    assert sorted(source.read) == list(range(1, 21))


@pytest.mark.parametrize("lift", ["session", "period"])
def test_rank_reads_a_dense_candidate_that_its_session_or_period_may_lift_into_the_anchors(
    lift: str,
) -> None:
    source = ChainSource(60, sessions=["a", None])  # even memories in session "a"
    lexical = {i: 1.0 - i / 100 for i in range(1, 21, 2)}  # ten odd ones, no session
    hits = [VectorHit(memory_id=i, similarity=1.0 - i / 60) for i in range(1, 61)]
    # 52 (session "a", 52 days old) is far below the 5th lexical match on words and meaning,
    # but its session, or the period the query names, may lift it above.
    sessions = {"a": 1.0} if lift == "session" else {}
    periods = (Period(start=NOW - timedelta(days=53), end=NOW - timedelta(days=51)),)
    evidence = Evidence(
        lexical=lexical, sessions=sessions, hits=hits, periods=periods if lift == "period" else ()
    )
    config = RetrievalSettings(anchors=5, spread_depth=0, w_session=3.0, w_period=3.0)
    ranked = rank(evidence, source, SearchRequest(namespace=NS, query="q", k=1), config, now=NOW)
    assert 52 in source.read
    assert ranked[0].memory_id == (2 if lift == "session" else 52)


CHATTER = [
    "Ines: the weather was awful all week, rain every single day",
    "Maya: ugh, same here, I stayed in and watched films all weekend",
    "Ines: which films? anything good on the streaming services lately",
    "Maya: a couple of old comedies, nothing special, the weekend was slow",
]


def test_search_chat_excerpt_finds_the_memory_its_last_turn_asks_about(fresh: Store) -> None:
    # The chat itself was stored turn by turn (as a companion does), beside older memories.
    chat_memories = [
        {"content": line, "timestamp": JUNE, "session_id": "today"} for line in CHATTER
    ]
    fresh.add_memories(NS, [*CORPUS, *chat_memories], now=NOW)
    fresh.indexer.sync()
    query = "\n".join([*CHATTER, "Ines: wait, what did Melanie paint last year?"])
    result = _search(fresh, query, k=3)
    assert _contents(result)[0] == "Melanie: I painted a lake sunrise last year."
