"""The memory store as one object: SQL, the vector index, the lexical cache, search and recall.

The CLI, the API and the benchmarks all go through ``Store``; it only wires parts together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

from loguru import logger

from secretary.config import Settings
from store.db import check_schema, make_engine, upgrade
from store.embedder import Embedder, make_embedder
from store.errors import ValidationFailed
from store.indexer import Indexer
from store.lexical import LexicalCache
from store.repository import AddResult, Repository
from store.schemas import Limits, LogIn, MemoryIn, parse_items
from store.search import Searcher
from store.vector_index import VectorIndex


class Store:
    """Given settings, open the store's parts lazily; ``close()`` flushes what is pending."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.engine = make_engine(settings.database_url)
        self.repository = Repository(self.engine)
        self._embedder = embedder
        self.lexical = LexicalCache()
        self.limits = Limits(
            max_content_chars=settings.ingest.max_content_chars,
            max_batch=settings.ingest.max_batch,
            max_tags=settings.ingest.max_tags,
            max_tag_chars=settings.ingest.max_tag_chars,
        )

    @classmethod
    def open(cls, settings: Settings, *, create: bool = False, **kwargs: Any) -> Store:
        """Open the store; ``create=True`` creates or upgrades the schema, else it must be new."""
        store = cls(settings, **kwargs)
        if create:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            upgrade(store.engine)
        else:
            check_schema(store.engine)
        return store

    @cached_property
    def embedder(self) -> Embedder:
        if self._embedder is not None:
            return self._embedder
        config = self.settings.index
        return make_embedder(
            provider=config.embedder,
            model=config.embedder_model or None,
            api_base=config.embedder_api_base or None,
            api_key=config.embedder_api_key or None,
            cache_dir=self.settings.data_dir / "cache",
        )

    @cached_property
    def index(self) -> VectorIndex:
        url = self.settings.index.chroma_url or None
        return VectorIndex.open(
            embedder=self.embedder, path=None if url else self.settings.chroma_path, url=url
        )

    @cached_property
    def searcher(self) -> Searcher:
        return Searcher(
            repository=self.repository,
            index=lambda: self.index,
            lexical=self.lexical,
            settings=self.settings.retrieval,
        )

    @cached_property
    def indexer(self) -> Indexer:
        return Indexer(
            repository=self.repository, index=self.index, batch_size=self.settings.index.batch_size
        )

    def warm_up(self, namespace: str) -> None:
        """Load what a first search of ``namespace`` needs: the model, BM25, the collection.

        Raise VectorIndexError or EmbedderError if the vector side cannot be loaded (BM25 is
        built first, so it is warm either way).
        """
        self.searcher.lexical_view(namespace)
        self.index.query(namespace, self.index.embed_query(namespace), 1)

    def warm_namespaces(self) -> list[str]:
        """The namespaces a warm-up loads: as many as the lexical cache holds, largest first."""
        return self.repository.largest_namespaces(self.lexical.capacity)

    # -- writes --------------------------------------------------------------------------------

    def add_memories(
        self,
        namespace: str,
        raw_items: Sequence[Mapping[str, Any]],
        *,
        now: datetime,
        source: str = "api",
        labels: Sequence[str] | None = None,
    ) -> AddResult:
        """Validate and insert memories; raise ValidationFailed, writing nothing, on a bad item."""
        items, problems = parse_items(MemoryIn, raw_items, self.limits, labels=labels)
        if problems:
            raise ValidationFailed(problems)
        return self.repository.add_memories(namespace, items, now=now, source=source)

    def add_logs(
        self,
        namespace: str,
        raw_items: Sequence[Mapping[str, Any]],
        *,
        now: datetime,
        labels: Sequence[str] | None = None,
    ) -> AddResult:
        items, problems = parse_items(LogIn, raw_items, self.limits, labels=labels)
        if problems:
            raise ValidationFailed(problems)
        return self.repository.add_logs(namespace, items, now=now)

    def close(self) -> None:
        """Release the vector index client (if it was opened) and the database connections."""
        logger.debug("closing the store")
        if "index" in self.__dict__:  # the cached property was opened
            self.index.close()
        self.engine.dispose()
