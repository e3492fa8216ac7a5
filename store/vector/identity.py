"""What a namespace's Chroma collection says of itself, and what the index refuses to use.

Each collection's metadata names its namespace, the embedder that made its vectors, its layout,
whether its vectors carry the fields searches filter by, and the store it belongs to
(``store_identity`` in SQL). Collections are named by namespace, so a second store pointed at
the same Chroma server would reach the first one's collections and write over their vectors of
the same memory ids, unseen by either: the store's id turns that into a refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chromadb.api.models.Collection import Collection

from store.vector.chroma import EmbedderMismatchError, IncompatibleCollection

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


def check_collection(
    namespace: str,
    collection: Collection,
    embedder: Embedder,
    store_id: str | None,
    target: str,
) -> None:
    """Raise IncompatibleCollection if the collection belongs to another store or namespace,
    or was made by another embedder or in another layout. A collection made before collections
    named their store (and fit otherwise) becomes ``store_id``'s. ``store_id`` None: any
    store's collection is used (a harness that opens an index without a store)."""
    metadata = collection.metadata or {}
    owner = metadata.get("store_id")
    if store_id is not None and owner is not None and owner != store_id:
        raise IncompatibleCollection(
            f"collection {collection.name} in {target} holds namespace {namespace!r} of another "
            f"store (store id {owner}; this one is {store_id}): one Chroma server serves one "
            "store, so give this store a server of its own"
        )
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
    if store_id is not None and owner is None:
        collection.modify(metadata={**metadata, "store_id": store_id})
