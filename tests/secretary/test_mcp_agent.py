"""The MCP tools as an agent's host meets them, through the MCP SDK's own client over
streamable HTTP: what a search costs in the model's context, and a conversation handed over,
dreamt about (the scripted model on 127.0.0.1 through litellm) and found again."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from secretary.config import Settings
from secretary.mcp_server.app import http_app
from store.clock import utc_now
from store.service import Store
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.live_server import live_server
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer
from tests.helpers.scripted_model import ScriptedModel
from tests.secretary.test_mcp import KEY_A, KEYS, ids_of, ok, over_http

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "companion.jsonl"


def settings(data_dir: Path, **sections: Any) -> Settings:
    keys = [{"key": k.key, "namespaces": list(k.namespaces), "name": k.name} for k in KEYS]
    return Settings.model_validate({"data_dir": str(data_dir), "api": {"keys": keys}, **sections})


# -- a search's cost in the context -------------------------------------------------------------


@pytest.fixture
def sample_store(tmp_path: Path) -> Iterator[Store]:
    """Key A's namespace holding the README demo's 26 memories (typical lengths and types)."""
    store = Store.open(settings(tmp_path), create=True, embedder=FakeEmbedder())
    items = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    store.add_memories("a", items, now=utc_now())
    yield store
    store.close()


def test_mcp_search_of_ten_hits_fits_in_2000_characters(sample_store: Store) -> None:
    async def run(url: str) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
        async with over_http(url, KEY_A) as client:
            query = {"query": "what did Maya do?", "k": 10}
            result = await client.call_tool("search_memories", query)
            text = " ".join(getattr(block, "text", "") for block in result.content)
            detailed = ok(await client.call_tool("search_memories", {**query, "detail": True}))
            return text, ok(result), detailed["hits"]

    with live_server(http_app(sample_store)) as url:
        text, found, hits = asyncio.run(run(url))
    assert len(found["hits"]) == 10
    # What the model reads is the compact JSON of the structured answer, nothing more.
    assert text == json.dumps(found, separators=(",", ":"), ensure_ascii=False)
    texts = sum(len(hit["text"]) for hit in hits)
    overhead = (len(text) - texts) / len(hits)
    assert len(text) <= 2000, text
    assert overhead <= 40, (overhead, text)
    assert ids_of(found) == [hit["id"] for hit in hits]
    # The detailed answer still carries every part of the score.
    assert {"relevance", "lexical", "dense", "activation"} <= set(hits[0]["breakdown"])


def test_mcp_answers_are_compact_json(sample_store: Store) -> None:
    async def run(url: str) -> str:
        async with over_http(url, KEY_A) as client:
            result = await client.call_tool("list_memories", {"limit": 3})
            return " ".join(getattr(block, "text", "") for block in result.content)

    with live_server(http_app(sample_store)) as url:
        text = asyncio.run(run(url))
    assert "\n" not in text
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


# -- a conversation handed over, dreamt about, found -------------------------------------------


@pytest.fixture
def model() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, ScriptedModel())
        yield server


def until(check: Any, seconds: float = 60.0) -> Any:
    """Poll ``check()`` until it returns something true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"nothing after {seconds} s")


async def search_until(client: Client, query: str, seconds: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = ok(await client.call_tool("search_memories", {"query": query}))
        if any("ukulele" in line for line in found["hits"]):
            return found
        await asyncio.sleep(0.2)
    pytest.fail(f"search for {query!r} found nothing extracted after {seconds} s")


def test_mcp_conversation_handed_over_dreamt_and_found(
    tmp_path: Path, model: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    llm = {"model": "openai/test-model", "api_base": model.api_base, "api_key": "x"}
    chosen = settings(tmp_path, llm={**llm, "max_attempts": 1}, schedule={"poll_seconds": 0.2})
    store = Store.open(chosen, create=True, embedder=FakeEmbedder())
    turns = [
        {"role": "user", "content": "I started learning the ukulele last week.",
         "timestamp": "2026-03-01T18:30:00Z"},
        {"role": "assistant", "content": "How is it going so far?",
         "timestamp": "2026-03-01T18:30:05Z"},
    ]  # fmt: skip
    conversation = {"session_id": "chat-1", "turns": turns}

    async def run(url: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with over_http(url, KEY_A) as client:
            first = ok(await client.call_tool("add_conversation", conversation))
            again = ok(await client.call_tool("add_conversation", {**conversation, "dream": True}))
            found = await search_until(client, "ukulele")
            return first, again, found

    try:
        with live_server(http_app(store)) as url:
            first, again, found = asyncio.run(run(url))
            request = until(
                lambda: (
                    (r := store.db.dream_requests.get(again["dream_request"]))
                    and r.status == "done"
                    and r
                )
            )
    finally:
        store.close()
    assert len(first["ids"]) == 2
    assert first["created"] == first["ids"]
    assert "dream_request" not in first
    assert "dream_note" not in again  # a model is configured: the dream extracts
    # Handing the same turns over again stores nothing new.
    assert (again["ids"], again["created"]) == (first["ids"], [])
    assert request.namespace == "a"
    assert "ExtractorReply" in model.requests[0].body["response_format"]["json_schema"]["name"]
    assert found["hits"][0].endswith("The user said: I started learning the ukulele last week.")
