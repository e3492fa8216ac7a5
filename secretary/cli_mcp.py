"""`secretary mcp`: serve the memory tools to an MCP client (an agent), over stdio or HTTP."""

from __future__ import annotations

import asyncio

import click
from loguru import logger

from secretary.cli_common import Context, _store, listening, pass_context


def _address(text: str) -> tuple[str, int]:
    """Given HOST:PORT (an IPv6 host in brackets), return both. Raise BadParameter if malformed."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, e.g. 127.0.0.1:8766, not {text!r}")
    return host, int(port)


@click.command("mcp")
@click.option(
    "--http",
    "address",
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; each request then "
    "brings its own API key (Authorization: Bearer KEY).",
)
@click.option(
    "--api-key",
    envvar="SECRETARY_API_KEY",
    help="Over stdio, act as this key of [[api.keys]] (default: $SECRETARY_API_KEY); its "
    "namespaces are the tools' namespaces. Not needed when no keys are configured.",
)
@click.option(
    "--namespace",
    "-n",
    envvar="SECRETARY_NAMESPACE",
    help="The tools' default namespace (default: the key's only one, or 'default' with no keys).",
)
@pass_context
def mcp(ctx: Context, address: str | None, api_key: str | None, namespace: str | None) -> None:
    """Serve the memory tools to an MCP client: hand over conversation turns (and ask
    for a dream), search, add, get, list, update, delete and forget memories, within
    the key's namespaces.

    \b
    stdio (the default) is what an agent launches, e.g. in Claude Desktop's config:
      {"command": "secretary", "args": ["mcp"],
       "env": {"SECRETARY_DATA_DIR": "...", "SECRETARY_API_KEY": "..."}}
    --http HOST:PORT serves many clients, each with its own key. See docs/mcp.md.
    """
    from secretary.mcp_server.app import caller, http_app, run_stdio
    from store.api.errors import ApiError

    keys = ctx.settings.api.keys
    bind = _address(address) if address is not None else None
    if bind is not None and api_key is not None:
        raise click.BadParameter(
            "over HTTP each request brings its own key: leave out --api-key (SECRETARY_API_KEY)",
            param_hint="--api-key",
        )
    if bind is None:
        try:
            who = caller(keys, api_key)
        except ApiError:
            what = "invalid API key" if api_key else "this store has API keys ([[api.keys]])"
            raise click.BadParameter(
                f"{what}: pass one of them as --api-key or SECRETARY_API_KEY",
                param_hint="--api-key",
            ) from None
        if namespace is not None and not who.allows(namespace):
            raise click.BadParameter(
                f"this API key may not use namespace {namespace!r}", param_hint="--namespace"
            )
    with _store(ctx) as store:
        if bind is None:
            try:
                asyncio.run(run_stdio(store, api_key=api_key, namespace=namespace))
            except KeyboardInterrupt:
                raise SystemExit(130) from None
            return
        import uvicorn

        host, port = bind
        logger.info("serving the MCP tools on http://{}:{}/mcp", host, port)
        with listening(host, port):
            uvicorn.run(
                http_app(store, host=host, namespace=namespace),
                host=host,
                port=port,
                log_config=None,
                timeout_graceful_shutdown=5,
            )
