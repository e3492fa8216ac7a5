"""Chroma vector index of memories: one collection per namespace, derived from SQL.

Each memory is one vector, the embedding of its text, stored under the id ``str(memory_id)``
with the SQL row's version as metadata. Everything here can be rebuilt from SQL; ``versions()``
lets a caller find what drifted.

A rebuild fills a second collection of the namespace (slot ``NEXT``) while searches keep using
the one in place (``LIVE``), then ``promote()`` puts the new one in its place by renaming; the
indexer (``store.vector.indexer``) drives it and records its progress in SQL. How often a
collection saves its graph is set in ``store.vector.chroma`` (``COLLECTION_CONFIGURATION``).

One vector per memory is a measured choice: extra vectors per sentence and of "previous turn +
turn" were worth 0.5 points of LoCoMo recall@10 but cost 3.6x the vectors, the indexing time
and the resident memory of the HNSW graph (about 2.3 KB per vector).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import numpy as np
import numpy.typing as npt
from chromadb.api import ClientAPI
from chromadb.api.client import Client
from chromadb.api.models.Collection import Collection
from chromadb.errors import ChromaError, NotFoundError
from loguru import logger

from store.requests import SearchFilters
from store.vector.calls import (
    VectorHit,
    count_vectors,
    delete_ids,
    held_ids,
    hits_of,
    int_field,
    memory_id_of,
    nearest,
    nearest_many,
    vanished,
    vectors_page,
    write_vectors,
)
from store.vector.chroma import (
    COLLECTION_CONFIGURATION,
    EmbedderMismatchError,
    ForeignCollection,
    IncompatibleCollection,
    VectorIndexError,
    describe_target,
    embedded_path,
    open_client,
    persists_often,
)
from store.vector.filters import filter_fields, where_of
from store.vector.identity import (
    FILTERABLE,
    check_collection,
    collection_metadata,
    foreign,
    refuse_foreign,
)
from store.vector.lru import Lru
from store.views import MemoryView

if TYPE_CHECKING:
    from store.vector.embedder import Embedder

# The errors live with the client; callers import them from here.
__all__ = [
    "COLLECTION_PREFIX",
    "LIVE",
    "NEXT",
    "OLD",
    "EmbedderMismatchError",
    "ForeignCollection",
    "IncompatibleCollection",
    "IndexItem",
    "VectorHit",
    "VectorIndex",
    "VectorIndexError",
    "collection_name",
]

COLLECTION_PREFIX = "mem_"
# Collection name suffixes of a namespace's slots: the collection searches use, the one a
# rebuild fills, and the one a rebuild replaced (dropped once the new one is in place).
LIVE, NEXT, OLD = "", "_next", "_old"
# Rows per get() while listing versions. Embedded Chroma fails on pages of ~32k rows
# ("too many SQL variables", SQLite's limit), and offset paging gets slower per page.
_VERSIONS_PAGE = 5000
_WRITE_BATCH = 1000  # per write: its max batch (5461) could outlast a 10 s HTTP timeout
_COLLECTIONS_PAGE = 100
# Collection handles a process keeps (the namespaces used last); one more is looked up again.
COLLECTIONS_KEPT = 256
_FALLBACK_BATCH = 1000  # when the server does not report its max batch size

T = TypeVar("T")
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, kw_only=True)
class IndexItem:
    """One memory to index, as of SQL row ``version``."""

    memory_id: int
    version: int
    text: str
    # What a search filter reads (``store.vector.filters``): every item the indexer writes has it.
    fields: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, memory: MemoryView) -> IndexItem:
        """Return the item of a memory: its text, version and filter fields."""
        return cls(
            memory_id=memory.id,
            version=memory.version,
            text=memory.content,
            fields=filter_fields(
                type=memory.type,
                event_time=memory.event_time,
                tags=memory.tags,
                metadata=memory.metadata,
            ),
        )


def collection_name(namespace: str, slot: str = LIVE) -> str:
    """Return the Chroma collection name of a namespace's slot (names are restricted, so hash)."""
    return COLLECTION_PREFIX + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24] + slot


class VectorIndex:
    """Memory vectors in Chroma, one collection per namespace."""

    def __init__(
        self, client: ClientAPI, embedder: Embedder, *, store_id: str | None = None
    ) -> None:
        self._client = client
        self._embedder = embedder
        # The store whose collections these are (``store_identity``); None: not checked.
        self._store_id = store_id
        self._target = describe_target(client)
        # Collection handles, each saving a lookup per query; rebuilds fill the next ones.
        self._collections: Lru[str, Collection] = Lru(COLLECTIONS_KEPT)
        self._next: Lru[str, Collection] = Lru(COLLECTIONS_KEPT)
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
        store_id: str | None = None,
    ) -> VectorIndex:
        """Connect to the server at ``url``, else open the embedded database at ``path``.
        With ``store_id``, only collections of that store (or of none yet) are used.

        Raise VectorIndexError if neither is given or the target cannot be opened.
        """
        index = cls(open_client(path=path, url=url, timeout=timeout), embedder, store_id=store_id)
        index._owns_client = True
        return index

    def close(self) -> None:
        """Release the client if open() made it (a PersistentClient holds files open)."""
        self._collections.clear()
        self._next.clear()
        if self._owns_client and isinstance(self._client, Client):
            self._client.close()

    def upsert(
        self, namespace: str, items: Sequence[IndexItem], *, slots: Sequence[str] = (LIVE,)
    ) -> None:
        """Write the vectors of these memories into each slot (one embedder call per batch).

        The live collection is created if missing; a rebuild's (``NEXT``) must exist
        (``prepare_next``). Not atomic, but a crash midway leaves a memory at its old version
        in ``versions()``, so a drift check repairs it.
        """
        latest = list({item.memory_id: item for item in items}.values())  # last one wins
        if not latest or not slots:
            return
        for slot in slots:  # fail on a mismatch (or a vanished rebuild) before embedding
            self._require(namespace, slot)
        limit = self._batch_limit()
        for start in range(0, len(latest), limit):
            batch = latest[start : start + limit]
            embeddings = self._embed([item.text for item in batch])
            ids = [str(item.memory_id) for item in batch]
            fields = [{**item.fields, "version": item.version} for item in batch]
            write = partial(write_vectors, ids=ids, embeddings=embeddings, metadatas=fields)
            action = f"writing {len(batch)} vectors to namespace {namespace!r}"
            for slot in slots:
                if self._call(namespace, action, write, create=slot == LIVE, slot=slot) is None:
                    raise vanished(namespace)

    def delete(
        self, namespace: str, memory_ids: Sequence[int], *, slots: Sequence[str] = (LIVE,)
    ) -> None:
        """Remove the vectors of these memories from each slot; unknown ids are fine."""
        ids = [str(memory_id) for memory_id in sorted(set(memory_ids))]
        limit = self._batch_limit()
        for start in range(0, len(ids), limit):
            delete = partial(delete_ids, ids=ids[start : start + limit])
            action = f"deleting memories from namespace {namespace!r}"
            for slot in slots:
                self._call(namespace, action, delete, create=False, slot=slot)

    def held(self, namespace: str, memory_ids: Sequence[int], *, slot: str = LIVE) -> list[int]:
        """Return those of these memories the slot's collection holds, read back from Chroma
        (what confirms a delete)."""
        ids = [str(memory_id) for memory_id in sorted(set(memory_ids))]
        found: list[str] = []
        for start in range(0, len(ids), limit := self._batch_limit()):
            read = partial(held_ids, ids=ids[start : start + limit])
            found += self._call(namespace, "reading back", read, create=False, slot=slot) or []
        return sorted(map(memory_id_of, found))

    @property
    def path(self) -> Path | None:
        """The directory of an embedded Chroma; None for a server."""
        return embedded_path(self._client)

    def query(
        self,
        namespace: str,
        embedding: np.ndarray,
        n: int,
        among: frozenset[int] | None = None,
        filters: SearchFilters | None = None,
    ) -> list[VectorHit]:
        """Return the ``n`` nearest memories, nearest first; [] if the namespace is empty.

        ``among``, if given, restricts the search to these memories, and so do ``filters`` in
        a `filterable` collection (in another one they are not applied).
        """
        if n <= 0 or (among is not None and not among):
            return []
        vector = self._query_vector(embedding)
        ids = None if among is None else [str(memory_id) for memory_id in sorted(among)]
        where = None if filters is None or not self.filterable(namespace) else where_of(filters)
        search = partial(nearest, vector=vector, n=n, ids=ids, where=where)
        result = self._call(namespace, f"querying namespace {namespace!r}", search, create=False)
        return [] if result is None else hits_of(result)

    def query_many(
        self, namespace: str, embeddings: Sequence[np.ndarray], n: int
    ) -> list[list[VectorHit]]:
        """The ``n`` nearest memories of each embedding, in one request; [] each if none."""
        if n <= 0 or not len(embeddings):
            return [[] for _ in embeddings]
        vectors = np.stack([self._query_vector(embedding) for embedding in embeddings])
        search = partial(nearest_many, vectors=vectors, n=n)
        result = self._call(namespace, f"querying namespace {namespace!r}", search, create=False)
        if result is None:
            return [[] for _ in embeddings]
        return [hits_of(result, row) for row in range(len(embeddings))]

    def filterable(self, namespace: str) -> bool:
        """Tell whether the namespace's collection filters by what vectors carry (``FILTERABLE``);
        False when it has none."""
        collection = self._collection(namespace, create=False)
        return collection is not None and (collection.metadata or {}).get("filters") == FILTERABLE

    def versions(self, namespace: str) -> dict[int, int]:
        """Return memory_id -> indexed version of every vector in the namespace."""
        found: dict[int, int] = {}
        offset = 0
        while True:
            page_of = partial(vectors_page, offset=offset, limit=_VERSIONS_PAGE)
            page = self._call(namespace, f"listing namespace {namespace!r}", page_of, create=False)
            ids = [] if page is None else page["ids"]
            metadatas = [] if page is None else page["metadatas"] or []
            for vector_id, metadata in zip(ids, metadatas, strict=True):
                found[memory_id_of(vector_id)] = int_field(metadata, "version")
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
            mine = [c for c in page if not foreign(c, self._store_id)]  # never another store's
            found.extend(ns for ns in map(_namespace_of, mine) if ns is not None)
            if len(page) < _COLLECTIONS_PAGE:
                return sorted(found)
            offset += _COLLECTIONS_PAGE

    def drop(self, namespace: str, slot: str = LIVE) -> None:
        """Delete the namespace's collection (of ``slot``); a missing one is fine."""
        self._cache(slot).pop(namespace, None)
        with self._errors(f"dropping namespace {namespace!r}"), suppress(NotFoundError):
            self._client.delete_collection(collection_name(namespace, slot))

    def count(self, namespace: str) -> int:
        """Return how many vectors the namespace's live collection holds (0 if it has none)."""
        found = self._call(
            namespace, f"counting namespace {namespace!r}", count_vectors, create=False
        )
        return found or 0

    def ping(self) -> None:
        """Return if the index answers; raise VectorIndexError if it cannot be reached."""
        with self._errors("checking that it answers"):
            self._client.heartbeat()

    def writable(self, namespace: str, slot: str) -> bool:
        """Tell whether the namespace's collection of ``slot`` exists and fits this embedder
        and layout (during a rebuild the live one may not: it is about to be replaced)."""
        try:
            return self._collection(namespace, create=False, slot=slot) is not None
        except ForeignCollection:
            raise  # not to be replaced by a rebuild of this store's
        except IncompatibleCollection:
            return False

    def prepare_next(self, namespace: str) -> bool:
        """Make sure the namespace has a collection for a rebuild to fill; return whether one
        was there already (a rebuild resumed), False if it was created (or made anew because it
        no longer fit this embedder)."""
        self._next.pop(namespace, None)  # look: another process may have dropped it
        try:
            if self._collection(namespace, create=False, slot=NEXT) is not None:
                return True
        except ForeignCollection:
            raise  # another store's rebuild: never dropped from here
        except IncompatibleCollection as exc:
            logger.warning("starting the rebuild of namespace {!r} over: {}", namespace, exc)
            self.drop(namespace, NEXT)
        self._collection(namespace, create=True, slot=NEXT)
        return False

    def promote(self, namespace: str) -> bool:
        """Put the rebuilt collection in place of the live one and drop the old one; return
        whether a collection is in place now (False: the rebuilt one was lost).

        Each step is a rename or a drop that is skipped once done, so a promotion cut short is
        finished by calling this again. Another process's cached handle keeps reading the old
        collection (by its id) until it is dropped, then looks the live one up again.
        """
        live, new, old = (collection_name(namespace, slot) for slot in (LIVE, NEXT, OLD))
        with self._errors(f"putting the rebuilt index of namespace {namespace!r} in place"):
            rebuilt = self._lookup(new)
            if rebuilt is not None:
                replaced = self._lookup(live)
                for collection in (rebuilt, replaced):  # another store's: never renamed
                    if collection is not None:
                        refuse_foreign(collection, self._store_id, self._target)
                if replaced is not None:
                    with suppress(NotFoundError):
                        self._client.delete_collection(old)  # left by an earlier promotion
                    replaced.modify(name=old)
                rebuilt.modify(name=live)
            with suppress(NotFoundError):
                self._client.delete_collection(old)
            in_place = self._lookup(live) is not None
        self._collections.pop(namespace, None)
        self._next.pop(namespace, None)
        return in_place

    def embed_documents(self, texts: list[str]) -> FloatArray:
        """Return the (len(texts), dim) vectors ``upsert`` would write for these texts."""
        return self._embed(texts)

    def embed_query(self, text: str) -> FloatArray:
        """Return the (dim,) query vector of ``text``."""
        vector: FloatArray = self._embed([text])[0]
        return vector

    def _call(
        self,
        namespace: str,
        action: str,
        fn: Callable[[Collection], T],
        *,
        create: bool,
        slot: str = LIVE,
    ) -> T | None:
        """Run fn on the namespace's collection; None if it does not exist and not ``create``."""
        for retry in (False, True):
            collection = self._collection(namespace, create=create, slot=slot)
            if collection is None:
                return None
            with self._errors(action):
                try:
                    return fn(collection)
                except NotFoundError:
                    if retry:
                        raise
                    # The cached collection was dropped or replaced (a rebuild), maybe by
                    # another process: look it up again once.
                    self._cache(slot).pop(namespace, None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _cache(self, slot: str) -> Lru[str, Collection]:
        return self._collections if slot == LIVE else self._next

    def _require(self, namespace: str, slot: str) -> None:
        """Open the slot's collection for writing: the live one is created if missing."""
        if self._collection(namespace, create=slot == LIVE, slot=slot) is None:
            raise vanished(namespace)

    def _lookup(self, name: str) -> Collection | None:
        try:
            return self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None

    def _collection(self, namespace: str, *, create: bool, slot: str = LIVE) -> Collection | None:
        """Return the namespace's collection of ``slot`` (cached), creating it if ``create``."""
        cache = self._collections if slot == LIVE else self._next
        cached = cache.get(namespace)
        if cached is not None:
            return cached
        name = collection_name(namespace, slot)
        with self._errors(f"opening namespace {namespace!r}"):
            if create:
                collection = self._client.get_or_create_collection(
                    name,
                    configuration=COLLECTION_CONFIGURATION,
                    metadata=self._collection_metadata(namespace),
                    embedding_function=None,  # we embed; Chroma's default would download a model
                )
            else:
                try:
                    collection = self._client.get_collection(name, embedding_function=None)
                except NotFoundError:
                    return None  # not cached: it may be created later
            self._check_collection(namespace, collection)
            persists_often(collection)
        cache[namespace] = collection
        return collection

    def _collection_metadata(self, namespace: str) -> dict[str, str | int]:
        return collection_metadata(namespace, self._embedder, self._store_id)

    def _check_collection(self, namespace: str, collection: Collection) -> None:
        check_collection(namespace, collection, self._embedder, self._store_id, self._target)

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


def _namespace_of(collection: Collection) -> str | None:
    """Return the namespace a collection holds, or None if it is not one of ours."""
    namespace = (collection.metadata or {}).get("namespace")
    if isinstance(namespace, str) and collection.name == collection_name(namespace):
        return namespace
    return None
