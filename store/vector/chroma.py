"""Opening Chroma, embedded or a server, with bounded waits; the vector index's errors.

``store.vector.index`` builds on this; it is apart so that the index module holds only what it
does with collections.
"""

from __future__ import annotations

from pathlib import Path
from types import FunctionType
from typing import Any
from urllib.parse import urlsplit

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.api.collection_configuration import (
    CreateCollectionConfiguration,
    UpdateHNSWConfiguration,
)
from chromadb.api.models.Collection import Collection
from chromadb.api.rust import RustBindingsAPI
from chromadb.config import APIVersion, Settings
from chromadb.errors import ChromaError
from loguru import logger

from store.errors import StoreError
from store.vector.allocator import map_large_blocks


class VectorIndexError(StoreError):
    """The vector index (Chroma) failed or could not be reached."""


class IncompatibleCollection(VectorIndexError):
    """A namespace's collection cannot be used as it is: a rebuild makes it usable, unless it
    is another store's (``ForeignCollection``)."""


class ForeignCollection(IncompatibleCollection):
    """A namespace's collection belongs to another store (on the same Chroma server): it is
    neither used nor rebuilt, renamed or dropped from here."""


class EmbedderMismatchError(IncompatibleCollection):
    """A namespace's collection was filled by a different embedder."""

    def __init__(
        self, namespace: str, stored: tuple[object, object], current: tuple[str, int]
    ) -> None:
        self.namespace = namespace
        self.stored = stored
        self.current = current
        super().__init__(
            f"namespace {namespace!r} was indexed with embedder {stored[0]} (dim {stored[1]}) "
            f"but this index uses {current[0]} (dim {current[1]}): rebuild the vector index"
        )


def open_client(*, path: Path | None, url: str | None, timeout: float) -> ClientAPI:
    """Connect to the server at ``url``, else open the embedded database at ``path``.

    Raise VectorIndexError if neither is given or the target cannot be opened.
    """
    settings = Settings(anonymized_telemetry=False)
    if url is not None:
        return _http_client(url, settings, timeout)
    if path is not None:
        return _persistent_client(path, settings)
    raise VectorIndexError("no vector index configured: give a Chroma path or url")


def describe_target(client: ClientAPI) -> str:
    """Name where a client points, for error messages."""
    settings = client.get_settings()
    if settings.chroma_server_host:
        scheme = "https" if settings.chroma_server_ssl_enabled else "http"
        host, port = settings.chroma_server_host, settings.chroma_server_http_port
        return f"the Chroma server at {scheme}://{host}:{port}"
    if settings.is_persistent:
        return f"the Chroma database at {settings.persist_directory}"
    return "the in-memory Chroma database"


def embedded_path(client: ClientAPI) -> Path | None:
    """Return the directory of an embedded (persistent) Chroma; None for a server or memory."""
    settings = client.get_settings()
    if settings.chroma_server_host or not settings.is_persistent:
        return None
    return Path(settings.persist_directory)


# The collection graphs an embedded Chroma keeps in memory, about 2.8 MB each for a namespace
# of a few dozen memories (2.6 MB of it hnswlib's lock table, whatever the size); the others are
# read from disk when used (2-8 ms more for a query, measured 2026-12-04). chromadb keeps (its
# open-file limit / 5) by default: 4,000 at a limit of 20,000, so a process serving thousands of
# namespaces grew by gigabytes (bare Chroma, 400 collections of 40 vectors: 1,165 MB of RSS).
# chromadb 1.5 splits this number over 64 shards, a graph going to the one its segment id hashes
# to, each keeping number // 64 graphs but at least the last one used: so any number below 128
# keeps up to 64, and after n namespaces about 64 * (1 - (63/64) ** n) of them (40 at 64, 50 at
# 100, 61 at 200, 64 from about 400): a process's memory grows until then, and is flat after.
EMBEDDED_GRAPHS_KEPT = 64


def _bounded_graphs(start: Any) -> Any:
    """Wrap chromadb's embedded start so that it keeps at most EMBEDDED_GRAPHS_KEPT graphs:
    chromadb 1.5 takes the number from the open-file limit and offers no setting for it."""

    def bounded(self: Any) -> None:
        kept = getattr(self, "hnsw_cache_size", None)
        if isinstance(kept, int):
            self.hnsw_cache_size = min(kept, EMBEDDED_GRAPHS_KEPT)
        start(self)

    return bounded


if isinstance(getattr(RustBindingsAPI, "start", None), FunctionType):
    RustBindingsAPI.start = _bounded_graphs(RustBindingsAPI.start)  # type: ignore[method-assign]


def _persistent_client(path: Path, settings: Settings) -> ClientAPI:
    map_large_blocks()  # the graphs it lets go of return their memory (store.vector.allocator)
    try:
        return chromadb.PersistentClient(path=path, settings=settings)
    except ChromaError as exc:  # e.g. the path is a file or not writable
        raise VectorIndexError(f"cannot open the Chroma database at {path}: {exc}") from exc


def _http_client(url: str, settings: Settings, timeout: float) -> ClientAPI:
    """Return a client for the server at url, after a bounded heartbeat probe."""
    host, port, ssl = _parse_url(url)
    # chromadb's own first request has no timeout; probe first so a dead host fails fast.
    api_path = (settings.chroma_server_api_default_path or APIVersion.V2).value
    base = f"{'https' if ssl else 'http'}://{host}:{port}{api_path}"
    try:
        httpx.get(f"{base}/heartbeat", timeout=timeout).raise_for_status()
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
    # chromadb reports a refused connection while connecting as a ValueError.
    except (httpx.HTTPError, ChromaError, ValueError) as exc:
        raise VectorIndexError(f"cannot reach the Chroma server at {url}: {exc}") from exc
    _set_request_timeout(client, timeout)
    return client


def _parse_url(url: str) -> tuple[str, int, bool]:
    """Return (host, port, ssl) of an http(s) URL; raise VectorIndexError if it is not one."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise VectorIndexError(f"invalid Chroma url {url!r}: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise VectorIndexError(f"invalid Chroma url {url!r}: expected http(s)://host[:port]")
    ssl = parts.scheme == "https"
    return parts.hostname, port or (443 if ssl else 8000), ssl


def _set_request_timeout(client: ClientAPI, timeout: float) -> None:
    """Bound every HTTP request: chromadb builds its httpx client with no timeout."""
    # chromadb exposes no setting for this, so reach into its FastAPI server object.
    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(timeout)


# How often a collection's HNSW graph is written to disk: after every HNSW_SYNC log entries
# (Chroma's default is 1,000, with 100 buffered before they enter the graph). Until then the
# entries are only in Chroma's write-ahead log (one SQLite table for every collection) and in the
# graph held in memory, and chromadb 1.5 loses them when it lets go of that graph: an embedded
# Chroma keeps the graphs of (its open-file limit / 5) collections, a server as many as its
# config says, and one read again from disk has none of the entries written since its last
# save; a collection never saved fails every query ("Error creating hnsw segment reader:
# Nothing found on disk"). Measured 2026-12-04 with 64 namespaces and 32 graphs kept, at 20:
# after one round of use 215 of 320 vectors written since the last save were no longer found
# and every namespace of fewer than 20 vectors failed; at 1 none. So a graph is saved at every
# write. What it costs (bench/results/chroma_sync.md): nothing for namespaces of hundreds; a
# namespace of 100,000 pays 55 ms of the server's CPU for a single-vector upsert instead of 8
# (upserts of 20 the same); and the log keeps only what a collection has not yet consumed (at
# 1,000 it kept every vector ever written, which every write and query read again).
HNSW_SYNC = 1
HNSW_PERSISTENCE: UpdateHNSWConfiguration = {"sync_threshold": HNSW_SYNC, "batch_size": HNSW_SYNC}
COLLECTION_CONFIGURATION: CreateCollectionConfiguration = {
    "hnsw": {"space": "cosine", "sync_threshold": HNSW_SYNC, "batch_size": HNSW_SYNC}
}


def persists_often(collection: Collection) -> None:
    """Make the collection write its graph every HNSW_SYNC entries if it does not (collections
    made before HNSW_SYNC, or by another program; Chroma lets it be changed on an existing
    collection). If Chroma refuses, say so and go on: the collection works, only slower."""
    hnsw = (collection.configuration or {}).get("hnsw") or {}
    if hnsw.get("sync_threshold") == HNSW_SYNC:  # batch_size is set with it, never shown
        return
    try:
        collection.modify(configuration={"hnsw": HNSW_PERSISTENCE})
    except (ChromaError, ValueError) as exc:
        logger.warning(
            "collection {} keeps saving its graph every {} changes ({}): its writes read a "
            "longer log",
            collection.name,
            hnsw.get("sync_threshold"),
            exc,
        )
