"""The memory store as one object: SQL, the vector index, the lexical cache, search and recall.

The CLI, the API, the daemon's jobs and the benchmarks all go through ``Store``; it wires the
parts together (opened lazily) and holds the few use cases every front end shares: validated
ingestion, a search that counts as a recall, and a person's edits, deletes and forgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from loguru import logger

from store.conflicts import OnConflict
from store.coordination.identity import store_id
from store.database import Database
from store.db import check_schema, make_engine, upgrade
from store.errors import ValidationFailed
from store.lexical.cache import LexicalCache
from store.lexical.source import SqlLexicalSource
from store.requests import SearchRequest
from store.schemas import Limits, LogIn, MemoryIn, parse_items, parse_patch
from store.search.searcher import Searcher, SearchResult
from store.settings import StoreSettings
from store.vector.embedder import Embedder, EmbedderError, make_embedder
from store.vector.health import IndexStatus
from store.vector.index import VectorIndex, VectorIndexError
from store.vector.indexer import Indexer
from store.vector.recent import RecentEmbeddings
from store.write import edits
from store.write.forget import ForgetSelection
from store.write.reinforcement import Reinforcer
from store.write.writer import AddResult


@dataclass(frozen=True, kw_only=True)
class Forgot(edits.ForgetResult):
    """A forget's result, and whether the vector index has let the memories go yet.

    ``index_pending``: SQL (the truth) erased them, but the vector index could not take them
    out yet (unreachable, written by another process, being rebuilt): their outbox entries stay,
    and the next index sync deletes them. ``warning`` says so, or that compacting Chroma's files
    failed, for the CLI, the API and the console to show.
    """

    index_pending: bool = False
    warning: str | None = None


class Store:
    """Given settings, open the store's parts lazily; ``close()`` flushes what is pending."""

    def __init__(self, settings: StoreSettings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.engine = make_engine(settings.database_url)
        self.db = Database(self.engine)
        self._embedder = embedder
        self.lexical = LexicalCache(settings.lexical_path, max_tail=settings.lexical.max_tail)
        self.limits = Limits(
            max_content_chars=settings.ingest.max_content_chars,
            max_batch=settings.ingest.max_batch,
            max_tags=settings.ingest.max_tags,
            max_tag_chars=settings.ingest.max_tag_chars,
            max_metadata_bytes=settings.ingest.max_metadata_bytes,
        )

    @classmethod
    def open(cls, settings: StoreSettings, *, create: bool = False, **kwargs: Any) -> Store:
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
        made = make_embedder(
            provider=config.embedder,
            model=config.embedder_model or None,
            api_base=config.embedder_api_base or None,
            api_key=config.embedder_api_key or None,
            cache_dir=self.settings.data_dir / "cache",
        )
        # A night embeds each new memory for the index, then for its neighbours: once will do.
        return RecentEmbeddings(made)

    @cached_property
    def index(self) -> VectorIndex:
        url = self.settings.index.chroma_url or None
        return VectorIndex.open(
            embedder=self.embedder,
            path=None if url else self.settings.chroma_path,
            url=url,
            store_id=store_id(self.engine),
        )

    @cached_property
    def searcher(self) -> Searcher:
        return Searcher(
            reads=self.db.search,
            memories=self.db.memories,
            index=lambda: self.index,
            lexical=self.lexical,
            settings=self.settings.retrieval,
            notes=self.index_status.notes,
        )

    @cached_property
    def indexer(self) -> Indexer:
        return Indexer(
            db=self.db,
            index=self.index,
            batch_size=self.settings.index.batch_size,
            status=self.index_status,
        )

    @cached_property
    def index_status(self) -> IndexStatus:
        """What is known about the vector index (reachable, rebuilding, behind), cached for
        searches and /healthz; it opens the index only when the index worker checks it."""
        return IndexStatus(
            rebuilds=self.db.rebuilds, reads=self.db.indexing, index=lambda: self.index
        )

    def sync_index(self) -> int:
        """What the API's index worker runs: finish pending rebuilds and apply the outbox
        (``Indexer.sync``), then check the index's health; return the work done. Raise what
        the sync raised, after recording a vector index failure."""
        try:
            applied = self.indexer.sync()
        except (VectorIndexError, EmbedderError) as exc:
            self.index_status.failed(exc)
            raise
        if applied:
            self.index_status.reached()
        self.index_status.check()
        return applied

    @cached_property
    def reinforcer(self) -> Reinforcer:
        """Recalls waiting to be written: a background thread flushes them (the API starts
        it), and ``close()`` writes what is left."""
        return Reinforcer(self.db.writer, self.settings.reinforcement)

    def warm_up(self, namespace: str) -> None:
        """Load what a first search of ``namespace`` needs: the model, BM25, the collection.

        BM25 is loaded in a second thread meanwhile (both mostly wait on files or run outside
        the GIL). Raise VectorIndexError or EmbedderError if the vector side cannot be loaded,
        once BM25 is warm.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="warm-lexical") as lexical:
            loaded = lexical.submit(self.searcher.lexical_view, namespace)
            try:
                self.index.query(namespace, self.index.embed_query(namespace), 1)
            finally:
                loaded.result()

    def warm_namespaces(self) -> list[str]:
        """The namespaces a warm-up loads: as many as the lexical cache holds, largest first."""
        return self.db.memories.largest_namespaces(self.lexical.capacity)

    # -- the use cases every front end shares ------------------------------------------------

    def search(self, request: SearchRequest, *, now: datetime) -> SearchResult:
        """Search; unless ``request.reinforce`` is off, the hits at least
        ``[reinforcement] min_relevance`` relevant count as a recall.

        Raise VectorIndexError only when the vector side fails in a way search cannot degrade
        around (it normally answers lexically and says so in ``degraded``).
        """
        result = self.searcher.search(request, now=now)
        floor = self.settings.reinforcement.min_relevance
        recalled = [hit.memory.id for hit in result.hits if hit.breakdown.relevance >= floor]
        if request.reinforce and recalled:
            self.reinforcer.record(recalled, now)
        return result

    def add_memories(
        self,
        namespace: str,
        raw_items: Sequence[Mapping[str, Any]],
        *,
        now: datetime,
        source: str = "api",
        labels: Sequence[str] | None = None,
        on_conflict: OnConflict = "error",
    ) -> AddResult:
        """Validate and insert memories; raise ValidationFailed, writing nothing, on a bad item,
        and IdConflict on an item naming a stored memory with other content (unless
        ``on_conflict`` is "update")."""
        items, problems = parse_items(MemoryIn, raw_items, self.limits, labels=labels)
        if problems:
            raise ValidationFailed(problems)
        return self.db.writer.add_memories(
            namespace, items, now=now, source=source, on_conflict=on_conflict, labels=labels
        )

    def add_logs(
        self,
        namespace: str,
        raw_items: Sequence[Mapping[str, Any]],
        *,
        now: datetime,
        labels: Sequence[str] | None = None,
        on_conflict: OnConflict = "error",
    ) -> AddResult:
        """Like add_memories, for conversation log lines."""
        items, problems = parse_items(LogIn, raw_items, self.limits, labels=labels)
        if problems:
            raise ValidationFailed(problems)
        return self.db.writer.add_logs(
            namespace, items, now=now, on_conflict=on_conflict, labels=labels
        )

    def edit(
        self,
        namespace: str,
        memory_id: int,
        raw_changes: Mapping[str, Any],
        *,
        now: datetime,
        expected_version: int | None = None,
        by: str | None = None,
    ) -> edits.Edited:
        """Validate and apply a person's edit of a memory (see store.write.edits.edit)."""
        changes = parse_patch(raw_changes, self.limits)
        return edits.edit(
            self.db.writer,
            namespace,
            memory_id,
            changes,
            now=now,
            expected_version=expected_version,
            by=by,
        )

    def delete(
        self,
        namespace: str,
        memory_id: int,
        *,
        now: datetime,
        expected_version: int | None = None,
        by: str | None = None,
    ) -> edits.Edited:
        """Delete a memory: a tombstone, undoable (see store.write.edits.delete)."""
        return edits.delete(
            self.db.writer, namespace, memory_id, now=now, expected_version=expected_version, by=by
        )

    def forget(
        self,
        namespace: str,
        selection: ForgetSelection,
        *,
        now: datetime,
        by: str | None = None,
        dry_run: bool = False,
    ) -> Forgot:
        """Erase memories everywhere, irreversibly (see store.write.forget): this process's lexical
        index and the saved ones drop them at once, other processes' at their next search; the
        vector index drops them before this returns (``Indexer.erase``), or says in the result
        that the next index sync will."""
        result = edits.forget(self.db.writer, namespace, selection, now=now, by=by, dry_run=dry_run)
        if dry_run:
            return Forgot(record_id=result.record_id, plan=result.plan)
        self.lexical.erase(namespace, SqlLexicalSource(self.db.search))
        pending, warning = self._erase_vectors(namespace, sorted(result.plan.ids))
        return Forgot(
            record_id=result.record_id, plan=result.plan, index_pending=pending, warning=warning
        )

    def _erase_vectors(self, namespace: str, ids: list[int]) -> tuple[bool, str | None]:
        """Drop erased memories from the vector index now (``Indexer.erase``); return whether
        that is left to the next index sync, and what to tell the person (None: nothing)."""
        if not ids:
            return False, None
        try:
            erased = self.indexer.erase(namespace, ids)
        except (VectorIndexError, EmbedderError) as exc:
            self.index_status.failed(exc)
            why = str(exc)
        else:
            if erased.pending is None:
                return False, erased.compaction_failed
            why = erased.pending
        warning = (
            f"erased from the database, but not yet from the vector index ({why}): "
            "the next index sync removes them"
        )
        logger.warning("forget of {} memories in namespace {!r}: {}", len(ids), namespace, warning)
        return True, warning

    def close(self) -> None:
        """Write pending recalls, wait for searches' vector queries in flight, release the
        vector index client (if it was opened) and the database connections."""
        logger.debug("closing the store")
        if "reinforcer" in self.__dict__:  # the cached property was made
            self.reinforcer.close()
        if "searcher" in self.__dict__:
            self.searcher.close()
        if "index" in self.__dict__:
            self.index.close()
        self.engine.dispose()
