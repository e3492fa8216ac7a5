"""What a namespace's Chroma collection says of itself, and what the index refuses to use.

Each collection's metadata names its namespace, the embedder that made its vectors, its layout,
whether its vectors carry the fields searches filter by, and the store it belongs to
(``store_identity`` in SQL). Collections are named by namespace, so a second store pointed at
the same Chroma server would reach the first one's collections and write over their vectors of
the same memory ids, unseen by either: the store's id turns that into a refusal, and another
store's collection is never rebuilt, renamed or dropped. A collection made before collections
named their store is used as before, by whoever opens it: none is taken over silently (the first
store to open it could be a staging copy); the store's next `secretary index rebuild` makes it
one of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chromadb.api.models.Collection import Collection

from store.vector.chroma import EmbedderMismatchError, ForeignCollection, IncompatibleCollection

if TYPE_CHECKING:
    from store.vector.embedder import Embedder

# In each collection's metadata: another layout (older versions: several vectors per memory)
# is refused until `secretary index rebuild`.
LAYOUT = "memory-v1"
# In the metadata of the collections made since each vector carries what a search filter reads
# (``fields``): only those are filtered by Chroma; an older one is filtered after retrieval until
# `secretary index rebuild` replaces it.
FILTERABLE = "filters-v1"


def collection_metadata(
    namespace: str, embedder: Embedder, store_id: str | None
) -> dict[str, str | int]:
    """The metadata a new collection of ``namespace`` is made with."""
    metadata: dict[str, str | int] = {
        "namespace": namespace,
        "embedder_model_id": embedder.model_id,
        "embedder_dim": embedder.dim,
        "layout": LAYOUT,
        "filters": FILTERABLE,
    }
    if store_id is not None:
        metadata["store_id"] = store_id
    return metadata


def foreign(collection: Collection, store_id: str | None) -> bool:
    """Tell whether the collection belongs to another store than ``store_id`` (None: checks
    nothing, as a harness that opens an index without a store)."""
    owner = (collection.metadata or {}).get("store_id")
    return store_id is not None and owner is not None and owner != store_id


def refuse_foreign(collection: Collection, store_id: str | None, target: str) -> None:
    """Raise ForeignCollection if the collection belongs to another store."""
    if foreign(collection, store_id):
        owner = (collection.metadata or {}).get("store_id")
        namespace = (collection.metadata or {}).get("namespace")
        raise ForeignCollection(
            f"collection {collection.name} in {target} holds namespace {namespace!r} of another "
            f"store (store id {owner}; this one is {store_id}): one Chroma server serves one "
            "store, so give this store a server of its own"
        )


def check_collection(
    namespace: str,
    collection: Collection,
    embedder: Embedder,
    store_id: str | None,
    target: str,
) -> None:
    """Raise ForeignCollection if the collection belongs to another store, and
    IncompatibleCollection if it holds another namespace or was made by another embedder or
    in another layout."""
    refuse_foreign(collection, store_id, target)
    metadata = collection.metadata or {}
    if metadata.get("namespace") != namespace:
        raise IncompatibleCollection(
            f"collection {collection.name} in {target} holds namespace "
            f"{metadata.get('namespace')!r}, not {namespace!r}"
        )
    stored = (metadata.get("embedder_model_id"), metadata.get("embedder_dim"))
    current = (embedder.model_id, embedder.dim)
    if stored != current:
        raise EmbedderMismatchError(namespace, stored, current)
    if metadata.get("layout") != LAYOUT:
        raise IncompatibleCollection(
            f"namespace {namespace!r} was indexed in another layout "
            f"({metadata.get('layout') or 'several vectors per memory'}, not {LAYOUT}): "
            "rebuild the vector index (secretary index rebuild)"
        )
