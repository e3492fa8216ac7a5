"""`secretary mcp` through the MCP SDK's own client: over stdio (the command as a subprocess,
a store in tmp_path) and over streamable HTTP (the app on 127.0.0.1, two keys)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from secretary.cli import cli
from secretary.config import Settings
from secretary.mcp_server.app import http_app
from store.clock import utc_now
from store.service import Store
from store.settings import ApiKey, ApiSettings
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.live_server import live_server

KEY_A = "key-a-0123456789"
KEY_B = "key-b-0123456789"
KEYS = (
    ApiKey(key=KEY_A, namespaces=("a",), name="agent a"),
    ApiKey(key=KEY_B, namespaces=("b",), name="agent b"),
)
TOOLS = {
    "search_memories",
    "add_memory",
    "add_conversation",
    "get_memory",
    "list_memories",
    "update_memory",
    "delete_memory",
    "forget_memories",
    "list_namespaces",
}
CONFIG = """\
[[api.keys]]
key = "key-a-0123456789"
namespaces = ["a"]
name = "agent a"

[[api.keys]]
key = "key-b-0123456789"
namespaces = ["b"]
"""


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a call that succeeded."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def ids_of(found: dict[str, Any]) -> list[int]:
    """The memory ids of a compact search answer's lines (``#12 event 2026-03-02 0.87 ...``)."""
    return [int(line.split(" ", 1)[0].removeprefix("#")) for line in found["hits"]]


def refused(result: CallToolResult) -> str:
    """The message of a call that came back as a tool error."""
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


async def tour(client: Client, others_memory: int) -> None:
    """Every tool once, as key A, against a store where ``others_memory`` is key B's."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description
        # Hosts' models pick tools by their descriptions: each opens with when to call it.
        assert re.match(r"Call it (only )?(when|before|at)\b", tool.description), tool.name
        assert tool.input_schema["type"] == "object"
    assert tools["forget_memories"].input_schema["properties"]["confirm"]["default"] is False
    assert "breakdown" in json.dumps(tools["search_memories"].output_schema)

    cat = ok(
        await client.call_tool(
            "add_memory",
            {"content": "Maya adopted a cat named Pepper", "tags": ["pets"], "importance": 7},
        )
    )
    assert (cat["namespace"], cat["version"], cat["tags"]) == ("a", 1, ["pets"])
    tea = ok(await client.call_tool("add_memory", {"content": "Maya likes green tea"}))
    # min_score 0: the hits themselves (the store's embedder hashes words: no real cosines)
    question = {"query": "what is the cat called?", "min_score": 0}
    found = ok(await client.call_tool("search_memories", question))
    date = cat["event_time"][:10]
    assert found["hits"][0].startswith(f"#{cat['id']} event {date} ")
    assert found["hits"][0].endswith(" Maya adopted a cat named Pepper")
    assert "degraded" not in found
    detailed = ok(await client.call_tool("search_memories", {**question, "detail": True}))
    hit = detailed["hits"][0]
    assert (hit["id"], hit["text"], hit["type"]) == (cat["id"], cat["content"], "event")
    assert set(hit["breakdown"]) >= {"relevance", "importance", "recency", "activation"}
    assert hit["score"] == round(hit["breakdown"]["relevance"], 2)

    assert ok(await client.call_tool("get_memory", {"memory_id": tea["id"]}))["content"] == (
        "Maya likes green tea"
    )
    first = ok(await client.call_tool("list_memories", {"limit": 1}))
    assert [m["id"] for m in first["memories"]] == [cat["id"]]
    second = ok(await client.call_tool("list_memories", {"cursor": first["next_cursor"]}))
    assert [m["id"] for m in second["memories"]] == [tea["id"]]
    assert second["next_cursor"] is None

    edited = ok(
        await client.call_tool(
            "update_memory",
            {"memory_id": tea["id"], "version": 1, "content": "Maya likes black tea"},
        )
    )
    assert (edited["memory"]["version"], edited["memory"]["content"]) == (2, "Maya likes black tea")
    stale = refused(
        await client.call_tool(
            "update_memory", {"memory_id": tea["id"], "version": 1, "pinned": True}
        )
    )
    assert "409" in stale
    assert "now at version 2" in stale
    invalid = refused(await client.call_tool("add_memory", {"content": "x", "type": "Not A Type"}))
    assert "422" in invalid
    assert "type" in invalid

    deleted = ok(await client.call_tool("delete_memory", {"memory_id": tea["id"], "version": 2}))
    assert deleted["status"] == "deleted"
    assert ok(await client.call_tool("get_memory", {"memory_id": tea["id"]}))["status"] == (
        "deleted"
    )

    dry = ok(await client.call_tool("forget_memories", {"ids": [cat["id"]]}))
    assert dry["dry_run"] is True
    assert [m["id"] for m in dry["memories"]] == [cat["id"]]
    assert ok(await client.call_tool("get_memory", {"memory_id": cat["id"]}))["status"] == "active"
    done = ok(await client.call_tool("forget_memories", {"ids": [cat["id"]], "confirm": True}))
    assert done["dry_run"] is False
    assert done["record_id"] is not None
    assert "404" in refused(await client.call_tool("get_memory", {"memory_id": cat["id"]}))

    # Another namespace's memory does not exist for this key, whatever the tool.
    for name, arguments in (
        ("get_memory", {"memory_id": others_memory}),
        ("get_memory", {"memory_id": others_memory, "namespace": "b"}),
        ("update_memory", {"memory_id": others_memory, "content": "mine"}),
        ("delete_memory", {"memory_id": others_memory}),
        ("forget_memories", {"ids": [others_memory], "confirm": True}),
    ):
        assert "does not exist" in refused(await client.call_tool(name, arguments)), name
    searched = ok(await client.call_tool("search_memories", {"query": "bike"}))
    assert others_memory not in ids_of(searched)
    listed = ok(await client.call_tool("list_namespaces", {}))["result"]
    assert [n["namespace"] for n in listed] == ["a"]

    # The time a memory is about goes in by the name it comes out with (get_memory) and is
    # changed with (update_memory): event_time.
    when = {"content": "Maya ran a 10k", "event_time": "2026-03-01T08:00:00Z"}
    ran = ok(await client.call_tool("add_memory", when))
    assert ran["event_time"].startswith("2026-03-01T08:00:00")


def open_store(data_dir: Path, **kwargs: Any) -> Store:
    settings = Settings(data_dir=data_dir, api=ApiSettings(keys=KEYS))
    return Store.open(settings, create=True, **kwargs)


def bikes(store: Store) -> int:
    """Key B's memory: what key A must not see."""
    added = store.add_memories("b", [{"content": "Maya's brother bought a bike"}], now=utc_now())
    return added.ids[0]


# -- stdio -------------------------------------------------------------------------------------


def test_mcp_over_stdio_every_tool_within_the_keys_namespace(tmp_path: Path) -> None:
    config = tmp_path / "secretary.toml"
    config.write_text(CONFIG)
    store = open_store(tmp_path / "data", embedder=FakeEmbedder())
    try:
        others = bikes(store)
    finally:
        store.close()
    command = Path(sys.executable).with_name("secretary")
    server = StdioServerParameters(
        command=str(command),
        args=["mcp"],
        env={
            "SECRETARY_CONFIG": str(config),
            "SECRETARY_DATA_DIR": str(tmp_path / "data"),
            "SECRETARY_API_KEY": KEY_A,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PATH": os.environ.get("PATH", ""),
        },
    )

    async def run() -> None:
        async with Client(server, read_timeout_seconds=60) as client:
            await tour(client, others)

    asyncio.run(run())


def test_mcp_command_refuses_a_missing_or_wrong_key(tmp_path: Path) -> None:
    config = tmp_path / "secretary.toml"
    config.write_text(CONFIG)
    runner = CliRunner()
    base = ["--config", str(config), "--data-dir", str(tmp_path), "mcp"]
    env = {"SECRETARY_API_KEY": ""}
    for args, said in (
        ([], "this store has API keys"),
        (["--api-key", "nope-nope-nope"], "invalid API key"),
        (["--api-key", KEY_A, "--namespace", "b"], "may not use namespace 'b'"),
        (["--http", "127.0.0.1:8766", "--api-key", KEY_A], "each request brings its own key"),
        (["--http", "nowhere"], "expected HOST:PORT"),
    ):
        result = runner.invoke(cli, base + args, env=env)
        assert result.exit_code == 2, result.output
        assert said in result.output


# -- streamable HTTP ---------------------------------------------------------------------------


@pytest.fixture
def http_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path, embedder=FakeEmbedder())
    yield store
    store.close()


@asynccontextmanager
async def over_http(url: str, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client


def test_mcp_over_http_every_tool_and_each_request_its_own_key(http_store: Store) -> None:
    others = bikes(http_store)

    async def run(url: str) -> None:
        async with over_http(url, KEY_A) as client_a, over_http(url, KEY_B) as client_b:
            await tour(client_a, others)
            mine = ok(await client_b.call_tool("get_memory", {"memory_id": others}))
            assert mine["namespace"] == "b"
            found = ok(await client_b.call_tool("search_memories", {"query": "Maya"}))
            assert ids_of(found) == [others]

    with live_server(http_app(http_store)) as url:
        asyncio.run(run(url))
        no_key = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert no_key.status_code == 401
        assert no_key.json()["error"]["problems"][0]["where"] == "header.authorization"


def test_mcp_forget_erases_conversation_lines_only_when_confirmed(http_store: Store) -> None:
    now = utc_now()
    rows = [
        {"session_id": session, "role": "user", "content": text, "timestamp": now}
        for session, text in (("s1", "Call Jordan"), ("s1", "I like tea"), ("s2", "JORDAN again"))
    ]
    ids = list(http_store.add_logs("a", rows, now=now).ids)
    theirs = list(http_store.add_logs("b", rows[:1], now=now).ids)

    def left(namespace: str) -> list[int]:
        return [line.id for line in http_store.db.work.logs_after(namespace, 0, limit=10)]

    async def run(url: str) -> None:
        async with over_http(url, KEY_A) as client:
            chosen = {"sessions": ["s1"], "match": ["jordan"]}
            dry = ok(await client.call_tool("forget_memories", chosen))
            assert (dry["dry_run"], dry["log_ids"]) == (True, [ids[0]])
            assert left("a") == ids
            done = ok(await client.call_tool("forget_memories", {**chosen, "confirm": True}))
            assert (done["dry_run"], done["logs"]) == (False, 1)
            assert left("a") == ids[1:]
            backwards = {"log_since": "2026-03-02T00:00:00Z", "log_until": "2026-03-01T00:00:00Z"}
            refusal = refused(await client.call_tool("forget_memories", backwards))
            assert "422" in refusal
            assert "is after until" in refusal
            everything = {"all_memories": True, "logs": True, "confirm": True}
            assert ok(await client.call_tool("forget_memories", everything))["logs"] == 2

    with live_server(http_app(http_store)) as url:
        asyncio.run(run(url))
    assert left("a") == []
    assert left("b") == theirs


def test_mcp_refuses_what_it_would_otherwise_take_for_something_else(http_store: Store) -> None:
    async def run(url: str) -> None:
        async with over_http(url, KEY_A) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            for tool in tools.values():
                assert tool.input_schema["additionalProperties"] is False, tool.name
            assert tools["search_memories"].input_schema["properties"]["query"]["maxLength"] == 4000
            ok(await client.call_tool("add_memory", {"content": "Maya likes green tea"}))
            for name, arguments, said in (
                ("search_memories", {"query": "tea", "min_scor": 0.9}, "min_scor"),
                ("search_memories", {"query": "tea", "namespace": ""}, "namespace"),
                ("add_memory", {"content": "Maya likes tea", "external_id": ""}, "external_id"),
                ("add_memory", {"content": "Maya likes tea", "session_id": ""}, "session_id"),
                ("forget_memories", {"types": ["Events"]}, "lowercase"),
                ("get_memory", {"memory_id": True}, "memory_id"),  # JSON true is no id 1
                ("forget_memories", {"ids": [True]}, "ids"),
                ("search_memories", {"query": "tea", "k": True}, "k"),
                ("list_memories", {"since": ""}, "since"),
                (
                    "search_memories",
                    {"query": "tea", "since": "9999-12-31T23:59:59-14:00"},
                    "out of range",
                ),
            ):
                message = refused(await client.call_tool(name, arguments))
                assert said in message, (name, arguments, message)
            listed = ok(await client.call_tool("list_memories", {}))
            assert [m["content"] for m in listed["memories"]] == ["Maya likes green tea"]

    with live_server(http_app(http_store)) as url:
        asyncio.run(run(url))


def test_mcp_errors_name_the_tools_own_arguments(http_store: Store) -> None:
    """An agent knows the tool's arguments, not the HTTP request behind it: a refusal names
    ``types[0]``, not ``query.type.0``; ``version``, not ``header.if-match``."""

    async def run(url: str) -> None:
        async with over_http(url, KEY_A) as client:
            tea = ok(await client.call_tool("add_memory", {"content": "Maya likes green tea"}))
            turn = {"role": "user", "content": "hi", "timestamp": "soon"}
            fine = {**turn, "timestamp": "2026-03-01T18:30:00Z"}
            for name, arguments, said in (
                ("search_memories", {"query": "  "}, "(query: must not be blank"),
                ("search_memories", {"query": "tea", "types": ["A B"]}, "(types[0]: must be"),
                ("add_memory", {"content": "x", "type": "A B"}, "(type: must be"),
                (
                    "add_memory",
                    {"content": "x", "event_time": "soon"},
                    "(event_time: should be an ISO 8601",
                ),
                ("add_memory", {"content": "x", "tags": ["ok", ""]}, "(tags[1]: String"),
                ("add_memory", {"content": "x", "metadata": {"a": "b" * 20000}}, "(metadata takes"),
                ("add_conversation", {"session_id": "s", "turns": [turn]}, "(turns[0].timestamp:"),
                ("add_conversation", {"session_id": "s" * 300, "turns": [fine]}, "(session_id:"),
                ("add_conversation", {"session_id": "s", "turns": [{"role": "user"}]}, "turns[0]"),
                ("list_memories", {"statuses": ["gone"]}, "(statuses[0]: Input should be"),
                ("update_memory", {"memory_id": tea["id"], "event_time": "x"}, "(event_time:"),
                (
                    "update_memory",
                    {"memory_id": tea["id"], "version": 5, "pinned": True},
                    "(version: now",
                ),
                ("delete_memory", {"memory_id": tea["id"], "version": 5}, "(version: now at"),
                ("forget_memories", {"tags": [""]}, "(tags[0]: String"),
                ("forget_memories", {"log_until": "x"}, "(log_until: should be an ISO"),
                ("forget_memories", {"sessions": [""]}, "(sessions[0]: String"),
                ("forget_memories", {}, "say what to erase: ids, external_ids, types"),
                ("search_memories", {"query": "tea", "min_scor": 1}, "min_scor: not an argument"),
            ):
                message = refused(await client.call_tool(name, arguments))
                assert said in message, (name, arguments, message)
                for internal in (
                    "query.",
                    "body.",
                    "path.",
                    "header.",
                    "items.",
                    "errors.pydantic",
                ):
                    assert internal not in message, (name, arguments, message)

    with live_server(http_app(http_store)) as url:
        asyncio.run(run(url))


def test_mcp_dream_without_a_model_says_nothing_will_be_extracted(http_store: Store) -> None:
    """The agent asked for a dream to turn the turns into memories: on a server without a
    model the answer says that will not happen (the turns are kept), not only the log."""
    turn = {"role": "user", "content": "I adopted a cat", "timestamp": "2026-03-01T18:30:00Z"}

    async def run(url: str) -> dict[str, Any]:
        async with over_http(url, KEY_A) as client:
            asked = {"session_id": "chat-1", "turns": [turn], "dream": True}
            return ok(await client.call_tool("add_conversation", asked))

    with live_server(http_app(http_store)) as url:
        handed = asyncio.run(run(url))
    assert handed["created"] == handed["ids"]
    assert handed["dream_request"] >= 1
    assert "no model is configured ([llm] model)" in handed["dream_note"]
    assert "no memories are extracted" in handed["dream_note"]
