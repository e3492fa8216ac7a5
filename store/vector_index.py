"""Chroma vector index of memories: one collection per namespace, derived from SQL.

Each memory gets several vectors: ``full`` (the whole text), ``sent`` (each sentence,
when there is more than one) and ``ctx`` (previous turn + this turn). Everything here
can be rebuilt from SQL; ``versions()`` lets a caller find what drifted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar
from urllib.parse import urlsplit

import chromadb
import httpx
import numpy as np
import numpy.typing as npt
from chromadb.api import ClientAPI
from chromadb.api.client import Client
from chromadb.api.collection_configuration import CreateCollectionConfiguration
from chromadb.api.models.Collection import Collection
from chromadb.api.types import GetResult, Metadata, QueryResult
from chromadb.base_types import InclusionExclusionOperator, LiteralValue, Where
from chromadb.config import APIVersion, Settings
from chromadb.errors import ChromaError, NotFoundError

from store.errors import StoreError
from store.text import split_sentences

if TYPE_CHECKING:
    from store.embedder import Embedder

KIND_FULL = "full"
KIND_SENT = "sent"
KIND_CTX = "ctx"

COLLECTION_PREFIX = "mem_"
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
    context: str | None = None  # previous turn of the same conversation, if any


@dataclass(frozen=True, kw_only=True)
class VectorHit:
    """One matching vector; ``similarity`` is cosine similarity in [-1, 1]."""

    memory_id: int
    kind: str
    similarity: float


class _Vector(NamedTuple):
    id: str
    memory_id: int
    version: int
    kind: str
    text: str


def collection_name(namespace: str) -> str:
    """Return the Chroma collection name of a namespace (names are restricted, so hash)."""
    return COLLECTION_PREFIX + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


def plan_vectors(item: IndexItem) -> list[_Vector]:
    """Return the vectors (id, kind, text to embed) that represent one memory."""
    texts = [(KIND_FULL, item.text)]
    sentences = split_sentences(item.text)
    if len(sentences) > 1:
        texts.extend((KIND_SENT, sentence) for sentence in sentences)
    if item.context and item.context.strip():
        texts.append((KIND_CTX, f"{item.context.strip()}\n{item.text}"))
    counts: dict[str, int] = {}
    vectors = []
    for kind, text in texts:
        i = counts[kind] = counts.get(kind, -1) + 1
        vectors.append(
            _Vector(f"{item.memory_id}:{kind}:{i}", item.memory_id, item.version, kind, text)
        )
    return vectors


def _batches(planned: Sequence[list[_Vector]], limit: int) -> Iterator[list[_Vector]]:
    """Group whole memories into batches of at most ``limit`` vectors; a bigger one goes alone."""
    batch: list[_Vector] = []
    for vectors in planned:
        if batch and len(batch) + len(vectors) > limit:
            yield batch
            batch = []
        batch.extend(vectors)
    if batch:
        yield batch


def _memory_filter(memory_ids: Sequence[int]) -> Where:
    values: list[LiteralValue] = list(memory_ids)
    membership: dict[InclusionExclusionOperator, list[LiteralValue]] = {"$in": values}
    return {"memory_id": membership}


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
        """Replace the vectors of these memories (one embedder call per batch).

        Not atomic, but a crash midway leaves a memory at its old version in
        ``versions()``, so a drift check repairs it.
        """
        latest = {item.memory_id: item for item in items}  # a repeated id: last one wins
        if not latest:
            return
        self._collection(namespace, create=True)  # fail on a mismatch before embedding
        limit = self._batch_limit()
        for batch in _batches([plan_vectors(item) for item in latest.values()], limit):
            embeddings = self._embed([vector.text for vector in batch])
            write = partial(_replace_vectors, vectors=batch, embeddings=embeddings, limit=limit)
            action = f"writing {len(batch)} vectors to namespace {namespace!r}"
            self._call(namespace, action, write, create=True)

    def delete(self, namespace: str, memory_ids: Sequence[int]) -> None:
        """Remove every vector of these memories; unknown ids are fine."""
        ids = sorted(set(memory_ids))
        limit = self._batch_limit()
        for start in range(0, len(ids), limit):
            where = _memory_filter(ids[start : start + limit])
            action = f"deleting memories from namespace {namespace!r}"
            self._call(namespace, action, partial(_delete_where, where=where), create=False)

    def query(self, namespace: str, embedding: np.ndarray, n: int) -> list[VectorHit]:
        """Return the ``n`` nearest vectors, nearest first; [] if the namespace is empty."""
        if n <= 0:
            return []
        vector = self._query_vector(embedding)
        search = partial(_nearest, vector=vector, n=n)
        result = self._call(namespace, f"querying namespace {namespace!r}", search, create=False)
        return [] if result is None else _hits(result)

    def versions(self, namespace: str) -> dict[int, int]:
        """Return memory_id -> indexed version, from each memory's ``full`` vector."""
        found: dict[int, int] = {}
        offset = 0
        while True:
            page_of = partial(_full_vectors_page, offset=offset, limit=_VERSIONS_PAGE)
            page = self._call(namespace, f"listing namespace {namespace!r}", page_of, create=False)
            metadatas = [] if page is None else page["metadatas"] or []
            for metadata in metadatas:
                found[_int_field(metadata, "memory_id")] = _int_field(metadata, "version")
            if len(metadatas) < _VERSIONS_PAGE:
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


def _replace_vectors(
    collection: Collection, *, vectors: list[_Vector], embeddings: FloatArray, limit: int
) -> None:
    """Delete the memories' vectors that the new ones do not overwrite, then write.

    Only stale ids (a text that lost sentences or its context) are deleted: in
    Chroma a delete that removes rows costs as much as a write, a lookup does not.
    ``full`` vectors go last: they carry the version ``versions()`` reports, so a
    crash between the writes shows as drift.
    """
    memory_ids = sorted({vector.memory_id for vector in vectors})
    existing = collection.get(where=_memory_filter(memory_ids), include=[])["ids"]
    stale = sorted(set(existing) - {vector.id for vector in vectors})
    if stale:
        collection.delete(ids=stale)
    order = sorted(range(len(vectors)), key=lambda i: vectors[i].kind == KIND_FULL)
    vectors, embeddings = [vectors[i] for i in order], embeddings[order]
    for start in range(0, len(vectors), limit):
        part = vectors[start : start + limit]
        collection.upsert(
            ids=[vector.id for vector in part],
            embeddings=embeddings[start : start + limit],
            metadatas=[_vector_metadata(vector) for vector in part],
        )


def _vector_metadata(vector: _Vector) -> Metadata:
    return {"memory_id": vector.memory_id, "version": vector.version, "kind": vector.kind}


def _delete_where(collection: Collection, *, where: Where) -> None:
    collection.delete(where=where)


def _nearest(collection: Collection, *, vector: FloatArray, n: int) -> QueryResult:
    return collection.query(
        query_embeddings=vector.reshape(1, -1), n_results=n, include=["metadatas", "distances"]
    )


def _full_vectors_page(collection: Collection, *, offset: int, limit: int) -> GetResult:
    return collection.get(
        where={"kind": KIND_FULL}, limit=limit, offset=offset, include=["metadatas"]
    )


def _hits(result: QueryResult) -> list[VectorHit]:
    """Turn a one-query result into hits; Chroma's cosine distance is 1 - similarity."""
    metadatas = (result["metadatas"] or [[]])[0]
    distances = (result["distances"] or [[]])[0]
    return [
        VectorHit(
            memory_id=_int_field(metadata, "memory_id"),
            kind=str(metadata.get("kind")),
            similarity=min(1.0, max(-1.0, 1.0 - float(distance))),  # float noise past ±1
        )
        for metadata, distance in zip(metadatas, distances, strict=True)
    ]


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
