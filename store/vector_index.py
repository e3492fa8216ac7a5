"""Chroma vector index of memories: one collection per namespace, derived from SQL.

Each memory is one vector, the embedding of its text, stored under the id ``str(memory_id)``
with the SQL row's version as metadata. Everything here can be rebuilt from SQL; ``versions()``
lets a caller find what drifted.

One vector per memory is a measured choice: extra vectors per sentence and of "previous turn +
turn" were worth 0.5 points of LoCoMo recall@10 but cost 3.6 vectors per memory, i.e. 3.6x the
indexing time and the resident memory of the HNSW graph (about 2.3 KB per vector).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

import chromadb
import httpx
import numpy as np
import numpy.typing as npt
from chromadb.api import ClientAPI
from chromadb.api.client import Client
from chromadb.api.collection_configuration import CreateCollectionConfiguration
from chromadb.api.models.Collection import Collection
from chromadb.api.types import GetResult, QueryResult
from chromadb.config import APIVersion, Settings
from chromadb.errors import ChromaError, NotFoundError

from store.errors import StoreError

if TYPE_CHECKING:
    from store.embedder import Embedder

COLLECTION_PREFIX = "mem_"
# Recorded in each collection's metadata: a collection of another layout (older versions kept
# several vectors per memory) is refused until `secretary index rebuild`.
LAYOUT = "memory-v1"
_COSINE: CreateCollectionConfiguration = {"hnsw": {"space": "cosine"}}
# Rows per get() while listing versions. Embedded Chroma fails on pages of ~32k rows
# ("too many SQL variables", SQLite's limit), and offset paging gets slower per page.
_VERSIONS_PAGE = 5000
# Vectors per write. Chroma builds the HNSW graph during the request (~300-1000
# vectors/s on 2 cores), so its max batch (5461) could outlast a 10 s HTTP timeout.
_WRITE_BATCH = 1000
_COLLECTIONS_PAGE = 100
_FALLBACK_BATCH = 1000  # when the server does not report its max batch size

T = TypeVar("T")
FloatArray = npt.NDArray[np.float32]


class VectorIndexError(StoreError):
    """The vector index (Chroma) failed or could not be reached."""


class EmbedderMismatchError(VectorIndexError):
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


@dataclass(frozen=True, kw_only=True)
class IndexItem:
    """One memory to index, as of SQL row ``version``."""

    memory_id: int
    version: int
    text: str


@dataclass(frozen=True, kw_only=True)
class VectorHit:
    """One matching memory; ``similarity`` is cosine similarity in [-1, 1]."""

    memory_id: int
    similarity: float


def collection_name(namespace: str) -> str:
    """Return the Chroma collection name of a namespace (names are restricted, so hash)."""
    return COLLECTION_PREFIX + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


class VectorIndex:
    """Memory vectors in Chroma, one collection per namespace."""

    def __init__(self, client: ClientAPI, embedder: Embedder) -> None:
        self._client = client
        self._embedder = embedder
        self._target = _describe_target(client)
        self._collections: dict[str, Collection] = {}  # saves a lookup per query
        self._max_batch: int | None = None
        self._owns_client = False  # close() closes only a client that open() made

    @classmethod
    def open(
        cls,
        *,
        embedder: Embedder,
        path: Path | None = None,
        url: str | None = None,
        timeout: float = 10.0,
    ) -> VectorIndex:
        """Connect to the server at ``url``, else open the embedded database at ``path``.

        Raise VectorIndexError if neither is given or the target cannot be opened.
        """
        settings = Settings(anonymized_telemetry=False)
        if url is not None:
            client = _http_client(url, settings, timeout)
        elif path is not None:
            client = _persistent_client(path, settings)
        else:
            raise VectorIndexError("no vector index configured: give a Chroma path or url")
        index = cls(client, embedder)
        index._owns_client = True
        return index

    def close(self) -> None:
        """Release the client if open() made it (a PersistentClient holds files open)."""
        self._collections.clear()
        if self._owns_client and isinstance(self._client, Client):
            self._client.close()

    def upsert(self, namespace: str, items: Sequence[IndexItem]) -> None:
        """Write the vectors of these memories (one embedder call per batch).

        Not atomic, but a crash midway leaves a memory at its old version in
        ``versions()``, so a drift check repairs it.
        """
        latest = list({item.memory_id: item for item in items}.values())  # last one wins
        if not latest:
            return
        self._collection(namespace, create=True)  # fail on a mismatch before embedding
        limit = self._batch_limit()
        for start in range(0, len(latest), limit):
            batch = latest[start : start + limit]
            embeddings = self._embed([item.text for item in batch])
            write = partial(_write_vectors, items=batch, embeddings=embeddings)
            action = f"writing {len(batch)} vectors to namespace {namespace!r}"
            self._call(namespace, action, write, create=True)

    def delete(self, namespace: str, memory_ids: Sequence[int]) -> None:
        """Remove the vectors of these memories; unknown ids are fine."""
        ids = [str(memory_id) for memory_id in sorted(set(memory_ids))]
        limit = self._batch_limit()
        for start in range(0, len(ids), limit):
            delete = partial(_delete_ids, ids=ids[start : start + limit])
            action = f"deleting memories from namespace {namespace!r}"
            self._call(namespace, action, delete, create=False)

    def query(
        self,
        namespace: str,
        embedding: np.ndarray,
        n: int,
        among: frozenset[int] | None = None,
    ) -> list[VectorHit]:
        """Return the ``n`` nearest memories, nearest first; [] if the namespace is empty.

        ``among``, if given, restricts the search to these memories.
        """
        if n <= 0 or (among is not None and not among):
            return []
        vector = self._query_vector(embedding)
        ids = None if among is None else [str(memory_id) for memory_id in sorted(among)]
        search = partial(_nearest, vector=vector, n=n, ids=ids)
        result = self._call(namespace, f"querying namespace {namespace!r}", search, create=False)
        return [] if result is None else _hits(result)

    def versions(self, namespace: str) -> dict[int, int]:
        """Return memory_id -> indexed version of every vector in the namespace."""
        found: dict[int, int] = {}
        offset = 0
        while True:
            page_of = partial(_vectors_page, offset=offset, limit=_VERSIONS_PAGE)
            page = self._call(namespace, f"listing namespace {namespace!r}", page_of, create=False)
            ids = [] if page is None else page["ids"]
            metadatas = [] if page is None else page["metadatas"] or []
            for vector_id, metadata in zip(ids, metadatas, strict=True):
                found[_memory_id(vector_id)] = _int_field(metadata, "version")
            if len(ids) < _VERSIONS_PAGE:
                return found
            offset += _VERSIONS_PAGE

    def namespaces(self) -> list[str]:
        """Return the namespaces that have a collection, sorted."""
        found: list[str] = []
        offset = 0
        while True:
            with self._errors("listing collections"):
                page = self._client.list_collections(limit=_COLLECTIONS_PAGE, offset=offset)
            found.extend(ns for ns in map(_namespace_of, page) if ns is not None)
            if len(page) < _COLLECTIONS_PAGE:
                return sorted(found)
            offset += _COLLECTIONS_PAGE

    def drop(self, namespace: str) -> None:
        """Delete the namespace's collection; a missing one is fine."""
        self._collections.pop(namespace, None)
        with self._errors(f"dropping namespace {namespace!r}"), suppress(NotFoundError):
            self._client.delete_collection(collection_name(namespace))

    def embed_query(self, text: str) -> FloatArray:
        """Return the (dim,) query vector of ``text``."""
        vector: FloatArray = self._embed([text])[0]
        return vector

    def _call(
        self, namespace: str, action: str, fn: Callable[[Collection], T], *, create: bool
    ) -> T | None:
        """Run fn on the namespace's collection; None if it does not exist and not ``create``."""
        for retry in (False, True):
            collection = self._collection(namespace, create=create)
            if collection is None:
                return None
            with self._errors(action):
                try:
                    return fn(collection)
                except NotFoundError:
                    if retry:
                        raise
                    # The cached collection was dropped, maybe by another process:
                    # look it up again once.
                    self._collections.pop(namespace, None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _collection(self, namespace: str, *, create: bool) -> Collection | None:
        """Return the namespace's collection (cached), creating it if ``create``."""
        cached = self._collections.get(namespace)
        if cached is not None:
            return cached
        name = collection_name(namespace)
        with self._errors(f"opening namespace {namespace!r}"):
            if create:
                collection = self._client.get_or_create_collection(
                    name,
                    configuration=_COSINE,
                    metadata=self._collection_metadata(namespace),
                    embedding_function=None,  # we embed; Chroma's default would download a model
                )
            else:
                try:
                    collection = self._client.get_collection(name, embedding_function=None)
                except NotFoundError:
                    return None  # not cached: it may be created later
        self._check_collection(namespace, collection)
        self._collections[namespace] = collection
        return collection

    def _collection_metadata(self, namespace: str) -> dict[str, str | int]:
        return {
            "namespace": namespace,
            "embedder_model_id": self._embedder.model_id,
            "embedder_dim": self._embedder.dim,
            "layout": LAYOUT,
        }

    def _check_collection(self, namespace: str, collection: Collection) -> None:
        """Raise if the collection belongs to another namespace or embedder."""
        metadata = collection.metadata or {}
        if metadata.get("namespace") != namespace:
            raise VectorIndexError(
                f"collection {collection.name} in {self._target} holds namespace "
                f"{metadata.get('namespace')!r}, not {namespace!r}"
            )
        stored = (metadata.get("embedder_model_id"), metadata.get("embedder_dim"))
        current = (self._embedder.model_id, self._embedder.dim)
        if stored != current:
            raise EmbedderMismatchError(namespace, stored, current)
        if metadata.get("layout") != LAYOUT:
            raise VectorIndexError(
                f"namespace {namespace!r} was indexed in another layout "
                f"({metadata.get('layout') or 'several vectors per memory'}, not {LAYOUT}): "
                "rebuild the vector index (secretary index rebuild)"
            )

    def _batch_limit(self) -> int:
        if self._max_batch is None:
            with self._errors("reading the max batch size"):
                reported = self._client.get_max_batch_size()
            self._max_batch = min(reported if reported > 0 else _FALLBACK_BATCH, _WRITE_BATCH)
        return self._max_batch

    def _embed(self, texts: list[str]) -> FloatArray:
        """Embed texts in one call and check the shape the embedder returned."""
        vectors = np.asarray(self._embedder.embed(texts), dtype=np.float32)
        expected = (len(texts), self._embedder.dim)
        if vectors.shape != expected:
            raise VectorIndexError(
                f"embedder {self._embedder.model_id} returned shape {vectors.shape}, "
                f"expected {expected}"
            )
        return vectors

    def _query_vector(self, embedding: np.ndarray) -> FloatArray:
        vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if vector.shape != (self._embedder.dim,):
            raise ValueError(
                f"query embedding has shape {np.shape(embedding)}, "
                f"expected ({self._embedder.dim},) for {self._embedder.model_id}"
            )
        return vector

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn chromadb and HTTP errors into VectorIndexError naming the target."""
        try:
            yield
        except httpx.TransportError as exc:
            raise VectorIndexError(f"cannot reach {self._target} while {action}: {exc}") from exc
        except (ChromaError, httpx.HTTPStatusError) as exc:
            raise VectorIndexError(f"{self._target} failed while {action}: {exc}") from exc


def _write_vectors(
    collection: Collection, *, items: Sequence[IndexItem], embeddings: FloatArray
) -> None:
    collection.upsert(
        ids=[str(item.memory_id) for item in items],
        embeddings=embeddings,
        metadatas=[{"version": item.version} for item in items],
    )


def _delete_ids(collection: Collection, *, ids: list[str]) -> None:
    collection.delete(ids=ids)


def _nearest(
    collection: Collection, *, vector: FloatArray, n: int, ids: list[str] | None
) -> QueryResult:
    # Ids carry the memory id: metadata is not needed, and fetching it would cost more than
    # the nearest-neighbour search itself (8.6 ms against 2.7 ms for 200 of 100k vectors).
    return collection.query(
        query_embeddings=vector.reshape(1, -1), n_results=n, ids=ids, include=["distances"]
    )


def _vectors_page(collection: Collection, *, offset: int, limit: int) -> GetResult:
    return collection.get(limit=limit, offset=offset, include=["metadatas"])


def _hits(result: QueryResult) -> list[VectorHit]:
    """Turn a one-query result into hits; Chroma's cosine distance is 1 - similarity."""
    ids = result["ids"][0] if result["ids"] else []
    distances = (result["distances"] or [[]])[0]
    return [
        VectorHit(
            memory_id=_memory_id(vector_id),
            similarity=min(1.0, max(-1.0, 1.0 - float(distance))),  # float noise past ±1
        )
        for vector_id, distance in zip(ids, distances, strict=True)
    ]


def _memory_id(vector_id: str) -> int:
    try:
        return int(vector_id)
    except ValueError:
        raise VectorIndexError(
            f"vector id {vector_id!r} is not a memory id: rebuild the vector index"
        ) from None


def _int_field(metadata: Mapping[str, object], key: str) -> int:
    value = metadata.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise VectorIndexError(
            f"vector metadata {key!r} is {value!r}, not an int: rebuild the index"
        )
    return value


def _namespace_of(collection: Collection) -> str | None:
    """Return the namespace a collection holds, or None if it is not one of ours."""
    namespace = (collection.metadata or {}).get("namespace")
    if isinstance(namespace, str) and collection.name == collection_name(namespace):
        return namespace
    return None


def _describe_target(client: ClientAPI) -> str:
    """Name where a client points, for error messages."""
    settings = client.get_settings()
    if settings.chroma_server_host:
        scheme = "https" if settings.chroma_server_ssl_enabled else "http"
        host, port = settings.chroma_server_host, settings.chroma_server_http_port
        return f"the Chroma server at {scheme}://{host}:{port}"
    if settings.is_persistent:
        return f"the Chroma database at {settings.persist_directory}"
    return "the in-memory Chroma database"


def _persistent_client(path: Path, settings: Settings) -> ClientAPI:
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
