"""The MCP server: the memory tools, served over stdio or streamable HTTP, in one process with
the store.

The tools call the store through the read API itself, in-process (the Python client over an
ASGI transport, no socket): the same validation, errors, namespaces and 404s as over HTTP,
with one command to start. The app's background workers (indexing new memories, writing
recalls, the warm-up) run while the server does, and, as under `secretary serve`, the dream
requests a tool asks for run here while no daemon runs on the store.

Who calls: over stdio, the one API key the server was started with (none on an open store);
over HTTP, each request's own ``Authorization: Bearer KEY`` or ``X-API-Key`` (checked before
any MCP message is read: 401 in the API's error shape).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from secretary import __version__
from secretary.client.aio import AsyncSecretaryClient
from secretary.config import Settings
from secretary.dispatch import in_process_dreamer
from secretary.mcp_server.tools import memory_tools
from store.api.app import create_app
from store.api.auth import Principal, authenticate, presented_key
from store.api.errors import ApiError, error_response
from store.coordination.dream_worker import Dreamer
from store.service import Store
from store.settings import ApiKey

# Never resolved: the in-process transport hands every request to the app directly.
API_BASE = "http://secretary.internal"
MCP_PATH = "/mcp"

INSTRUCTIONS = """\
Long-term memory. Before answering from memory, search_memories. Store what is worth keeping \
with add_memory (one statement each), or hand over whole conversations with add_conversation \
(the memory extracts what is worth keeping). Correct a memory with update_memory and remove \
one with delete_memory (both undoable by an operator). forget_memories erases for good: call \
it without confirm first, and confirm only what the user asked to forget. Memories of \
namespaces your key may not use do not exist for you."""


def caller(keys: Sequence[ApiKey], api_key: str | None) -> Principal:
    """Given the configured keys and the key a stdio server was started with, return who it
    acts as. Raise ApiError 401 if the store has keys and this is none of them."""
    return authenticate(keys, api_key)


def dreamer_of(store: Store) -> Dreamer | None:
    """What runs the dream requests the tools ask for in this process (as `secretary serve`
    does), given the secretary's settings; None for a store opened with the store's alone."""
    settings = store.settings
    return in_process_dreamer(store, settings) if isinstance(settings, Settings) else None


def in_process_client(api: FastAPI) -> httpx.AsyncClient:
    # The app answers its own errors (500 in its shape) instead of raising them into the tool.
    transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url=API_BASE)


def memory_server(
    http: httpx.AsyncClient,
    *,
    api_key: str | None = None,
    namespace: str | None = None,
    per_request: bool = False,
) -> MCPServer:
    """The MCP server with the memory tools over ``http``. The key is ``api_key``, or with
    ``per_request`` each request's own; ``namespace`` is the default one."""

    def connect(ctx: Context) -> AsyncSecretaryClient:
        key = presented_key(ctx.headers or {}) if per_request else api_key
        return AsyncSecretaryClient(API_BASE, api_key=key, namespace=namespace, http_client=http)

    return MCPServer(
        "memory-secretary",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        tools=memory_tools(connect),
    )


async def run_stdio(store: Store, *, api_key: str | None, namespace: str | None) -> None:
    """Serve the tools over this process's stdin and stdout until the client hangs up."""
    api = create_app(store, dreamer=dreamer_of(store))
    http = in_process_client(api)
    server = memory_server(http, api_key=api_key, namespace=namespace)
    async with api.router.lifespan_context(api), http:
        await server.run_stdio_async()


class KeyCheck:
    """Refuse HTTP requests without a valid API key (when the store has keys) with a 401."""

    def __init__(self, app: ASGIApp, keys: Sequence[ApiKey]) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.keys:
            try:
                authenticate(self.keys, presented_key(Headers(scope=scope)))
            except ApiError as exc:
                refusal = error_response(exc.status, exc.message, exc.problems, exc.headers)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(store: Store, *, host: str = "127.0.0.1", namespace: str | None = None) -> Starlette:
    """The tools over streamable HTTP at ``/mcp``, as an ASGI app whose lifespan runs the API's
    workers and the MCP sessions. ``host`` is where it binds: on a loopback address, requests
    naming another host are refused (DNS rebinding)."""
    api = create_app(store, dreamer=dreamer_of(store))
    http = in_process_client(api)
    server = memory_server(http, namespace=namespace, per_request=True)
    mcp_app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with (
            api.router.lifespan_context(api),
            mcp_app.router.lifespan_context(mcp_app),
            http,
        ):
            yield

    guarded = KeyCheck(mcp_app, store.settings.api.keys)
    return Starlette(routes=[Mount("/", app=guarded)], lifespan=lifespan)
