"""Queries of every shape against a companion's store (issue 26): a memory's own text, chat
excerpts whose cue is early or only at the end, questions about what the store does not hold,
and a relevance that means the same in a small store and a large one."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from secretary.config import Settings
from store.reads.search import ReadAhead
from store.requests import SearchRequest
from store.search.searcher import SearchResult
from store.service import Store
from store.settings import AGENT_MIN_SCORE
from store.vector.embedder import OnnxMiniLMEmbedder
from tests.helpers.fake_embedder import FakeEmbedder

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
NS = "maya"

SUMMARY = (
    "Over the spring Maya trained for her first half marathon in Lisbon. She started in "
    "February with three short runs a week along the river, added a long run on Sundays, "
    "and by April was running eighteen kilometres without stopping. A knee ache in March "
    "made her rest for ten days, and her physiotherapist gave her strengthening exercises "
    "that she kept doing every evening. Her sister Ines ran the last five kilometres with "
    "her on race day in May, and she finished in two hours and four minutes, crying at the "
    "finish line because her late father had always wanted to run that race. Afterwards "
    "she said running had become the calmest hour of her week, and she signed up for the "
    "Porto half marathon in the autumn, hoping to finish under two hours this time, with "
    "Ines again beside her for the whole distance and the family waiting at the end."
)
EVENTS = [
    "Maya adopted a grey rescue cat called Pixel from the shelter on Rua Augusta.",
    "Maya's grandmother taught her to make custard tarts the Christmas before she died.",
    "Maya failed her driving test twice before passing it in the summer of 2021.",
    "Maya got a promotion to senior designer at the studio and celebrated with sushi.",
    "Maya's father passed away in 2019 after a long illness; she still misses him a lot.",
    "Maya finished the Lisbon half marathon in two hours and four minutes, crying at the end.",
    "Maya broke her wrist falling off her bike on a rainy morning on the way to work.",
    "Maya and her sister Ines went camping in the Alentejo and saw the Milky Way.",
    "Maya started learning the cello at thirty and plays in a small amateur orchestra.",
    "Maya moved into a flat with a balcony where she grows tomatoes and basil.",
    SUMMARY,
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    embedder = OnnxMiniLMEmbedder(batch_size=16, threads=2)
    settings = Settings(data_dir=tmp_path_factory.mktemp("readings"))
    opened = Store.open(settings, create=True, embedder=embedder)
    items = [
        {"content": text, "timestamp": NOW - timedelta(days=40 * (i + 1))}
        for i, text in enumerate(EVENTS)
    ]
    opened.add_memories(NS, items, now=NOW)
    opened.indexer.sync()
    yield opened
    opened.close()


def _search(store: Store, query: str, **fields: Any) -> SearchResult:
    request = SearchRequest(namespace=NS, query=query, reinforce=False, **fields)
    return store.searcher.search(request, now=NOW)


@pytest.mark.parametrize("text", EVENTS)
def test_a_memorys_own_text_finds_it_first_with_the_highest_dense_part(
    store: Store, text: str
) -> None:
    hits = _search(store, text).hits
    assert hits[0].memory.content == text
    assert hits[0].breakdown.dense == max(hit.breakdown.dense for hit in hits)
    assert hits[0].breakdown.relevance > 0.9


def test_a_summary_with_line_breaks_searched_by_its_own_text_finds_it_first(
    store: Store,
) -> None:
    # Written as paragraphs, it reads as a chat; read as given too, it is its own match.
    text = SUMMARY.replace(". ", ".\n")
    hits = _search(store, text).hits
    assert hits[0].memory.content == SUMMARY


# The cue early, the latest turn small talk (the excerpt leads); the cue only in the latest
# turn, a question, after unrelated chatter (the focus leads).
CUE_EARLY = [
    "user: I was at the vet all afternoon, the shelter cat I adopted is sick",
    "user: Pixel stopped eating two days ago and just hides under the bed",
    "assistant: Oh no, that sounds worrying. What did the vet say?",
    "user: they want to run some tests tomorrow",
    "assistant: I see.",
    "user: yeah. anyway how are you",
]
# The cue early, then a question that goes on with the chat (it asks the assistant, not the
# store): the excerpt still leads.
CUE_EARLY_ASKING = [
    "user: I was at the vet all afternoon, the shelter cat I adopted is sick",
    "user: Pixel stopped eating two days ago and just hides under the bed",
    "assistant: Oh no, that sounds worrying. What did the vet say?",
    "user: they want to run tests tomorrow, I am so worried about my little cat",
    "assistant: I see. That must be hard.",
    "user: do you think the vet will find out why my sick cat Pixel stopped eating?",
]
CUE_LAST = [
    "user: work was long today, meetings all morning",
    "assistant: That sounds tiring. Did you get a break at all?",
    "user: a short one, I had soup at the place near the office",
    "assistant: Nice. Anything planned for the weekend?",
    "user: maybe. do you remember how my cello lessons started?",
]


@pytest.mark.parametrize(
    ("turns", "wanted"),
    [(CUE_EARLY, EVENTS[0]), (CUE_EARLY_ASKING, EVENTS[0]), (CUE_LAST, EVENTS[8])],
    ids=["cue-in-earlier-turns", "cue-early-then-a-question", "cue-only-in-last-line"],
)
def test_chat_finds_the_memory_wherever_its_cue_is(
    store: Store, turns: list[str], wanted: str
) -> None:
    assert _search(store, "\n".join(turns)).hits[0].memory.content == wanted


@pytest.mark.parametrize(
    ("turns", "excerpt_weight"),
    [(CUE_EARLY_ASKING, 1.0), (CUE_LAST, 0.5)],
    ids=["question-going-on-with-the-chat", "question-leaving-the-chat"],
)
def test_a_closing_question_weighs_the_excerpt_by_how_far_it_follows_the_chat(
    store: Store, turns: list[str], excerpt_weight: float
) -> None:
    searcher = store.searcher
    request = SearchRequest(namespace=NS, query="\n".join(turns), reinforce=False)
    evidence, degraded = searcher.evidence(request, ReadAhead(store.db.search, NS), now=NOW)
    assert degraded == ()
    assert searcher.settings.chat_aside == 0.5
    assert evidence.weight == 1.0  # the focus: a question is read fully
    assert [seen.weight for seen in evidence.also] == [excerpt_weight]


def test_keyword_and_one_line_queries_still_work(store: Store) -> None:
    assert _search(store, "cello orchestra").hits[0].memory.content == EVENTS[8]
    assert _search(store, "When did Maya break her wrist?").hits[0].memory.content == EVENTS[6]


def test_absent_topic_returns_nothing_at_the_agents_threshold_a_paraphrase_returns_it(
    store: Store,
) -> None:
    assert _search(store, "Porto 10k time").hits  # the plain API still answers with k hits
    for query in ("What is Maya's blood type?", "stock portfolio dividends in 2023"):
        assert _search(store, query, min_score=AGENT_MIN_SCORE).hits == ()
    found = _search(store, "Which pet did Maya take home from the animal shelter?",
                    min_score=AGENT_MIN_SCORE).hits  # fmt: skip
    assert [hit.memory.content for hit in found][:1] == [EVENTS[0]]


# A relevance is made of the memory's own cosine and term coverage, so it is the same in a
# store of 10 memories and of 10,000: exactly, as long as the approximate nearest-neighbour
# search returns the memory (a memory it misses counts the last cosine returned); the
# tolerance allows for float rounding in the two indexes' distances.
TOLERANCE = 1e-4


def test_relevance_is_the_same_in_a_store_of_10_and_of_10000(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    small = Store.open(Settings(data_dir=tmp_path / "small"), create=True, embedder=embedder)
    large = Store.open(Settings(data_dir=tmp_path / "large"), create=True, embedder=embedder)
    try:
        base = [
            {"content": t, "timestamp": NOW - timedelta(days=i)} for i, t in enumerate(EVENTS[:10])
        ]
        rng = random.Random(26)
        words = [f"w{n}" for n in range(5000)]  # a diverse store: no two notes alike
        filler = [
            {
                "content": " ".join(rng.choices(words, k=9)),
                "timestamp": NOW - timedelta(days=20 + i % 900),
            }
            for i in range(9_990)
        ]
        small.add_memories(NS, base, now=NOW)
        everything = base + filler
        for start in range(0, len(everything), 1000):  # the API's batch limit
            large.add_memories(NS, everything[start : start + 1000], now=NOW)
        small.indexer.sync()
        large.indexer.sync()
        for query in ("Which cat did Maya adopt from the shelter?", "wrist bike rainy"):
            request = SearchRequest(namespace=NS, query=query, reinforce=False)
            a = {
                h.memory.content: h.breakdown.relevance
                for h in small.searcher.search(request, now=NOW).hits
            }
            b = {
                h.memory.content: h.breakdown.relevance
                for h in large.searcher.search(request, now=NOW).hits
            }
            best = max(a, key=a.__getitem__)
            assert best in b
            assert b[best] == pytest.approx(a[best], abs=TOLERANCE)
    finally:
        small.close()
        large.close()


def test_a_chats_readings_embed_each_text_once(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    store = Store.open(Settings(data_dir=tmp_path), create=True, embedder=embedder)
    try:
        store.add_memories(NS, [{"content": EVENTS[0], "timestamp": NOW}], now=NOW)
        store.indexer.sync()
        chat = "user: the vet called today\nassistant: oh?\nuser: Pixel has to stay the night"
        before = len(embedder.calls)
        assert _search(store, chat).hits
        texts = [text for batch in embedder.calls[before:] for text in batch]
        assert sorted(texts) == sorted(set(texts))  # the whole excerpt is also the focus's tail
        assert chat in texts  # read as given
    finally:
        store.close()
