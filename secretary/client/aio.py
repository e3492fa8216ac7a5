"""``AsyncSecretaryClient``: the API over HTTP, for asyncio. The same calls as
``SecretaryClient`` (``secretary.client.calls``), awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import httpx

from secretary.client.calls import (
    Call,
    Calls,
    ForgetFilter,
    ListOptions,
    LogFilter,
    MemoryChanges,
    MemoryFields,
    OnConflict,
    RecordOptions,
    SearchOptions,
    answer,
    auth_headers,
)
from secretary.client.errors import ConnectionFailed, Invalid
from secretary.client.models import (
    AddResult,
    Deleted,
    DreamAccepted,
    DreamRequest,
    Edited,
    ForgetResult,
    Health,
    Memory,
    Namespace,
    Page,
    Recall,
    Record,
    RecordDetail,
    RecordDiff,
    RecordRef,
    Relation,
    SearchResult,
    Status,
    UndoResult,
)

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8765"


class AsyncSecretaryClient:
    """An asyncio client of the memory-secretary API.

    ``namespace`` is the default for calls that take one (a key with one namespace needs
    none); ``http_client`` replaces the one the client makes (the caller then closes it).
    Every refusal raises a ``SecretaryError`` subclass carrying the API's problem list.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        namespace: str | None = None,
        timeout: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.calls = Calls(namespace)
        self._headers = auth_headers(api_key)
        self._owned = http_client is None
        self._http = http_client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one call and return what its answer holds; raise SecretaryError if refused."""
        headers = {**self._headers, **dict(call.headers)}
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = await self._http.request(
                call.method, call.path, params=call.params, content=call.body, headers=headers
            )
        except httpx.InvalidURL as exc:  # e.g. a query too long for any URL: never sent
            raise Invalid(None, f"request not sent: {exc}") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        return answer(call, response.status_code, response.content)

    # -- writing -------------------------------------------------------------------------------

    async def add_memory(
        self,
        content: str,
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
        **fields: Unpack[MemoryFields],
    ) -> AddResult:
        """Store one memory (idempotent by external_id, or content, session and time)."""
        return await self.send(
            self.calls.add_memory(content, on_conflict=on_conflict, namespace=namespace, **fields)
        )

    async def add_memories(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> AddResult:
        """Store a batch: all of it, or nothing (Invalid, Conflict) with each problem named."""
        return await self.send(
            self.calls.add_memories(items, on_conflict=on_conflict, namespace=namespace)
        )

    async def add_logs(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> AddResult:
        """Store conversation log lines (session_id, role, content, timestamp, ...)."""
        return await self.send(
            self.calls.add_logs(items, on_conflict=on_conflict, namespace=namespace)
        )

    async def update(
        self,
        memory_id: int,
        *,
        version: int | None = None,
        namespace: str | None = None,
        **changes: Unpack[MemoryChanges],
    ) -> Edited:
        """Edit a memory (recorded, undoable); with ``version``, only that version (else
        StaleVersion)."""
        return await self.send(
            self.calls.update(memory_id, version=version, namespace=namespace, **changes)
        )

    async def delete(
        self, memory_id: int, *, version: int | None = None, namespace: str | None = None
    ) -> Deleted:
        """Delete a memory: a tombstone, undoable until retention purges it."""
        return await self.send(self.calls.delete(memory_id, version=version, namespace=namespace))

    async def forget(
        self,
        *,
        ids: Sequence[int] = (),
        external_ids: Sequence[str] = (),
        filter: ForgetFilter | None = None,
        all: bool = False,
        logs: bool = False,
        log_filter: LogFilter | None = None,
        dry_run: bool = False,
        namespace: str | None = None,
    ) -> ForgetResult:
        """Erase memories and conversation log lines everywhere, irreversibly (``log_filter``
        names lines, which take the memories extracted from them along); ``dry_run`` lists
        what would go."""
        return await self.send(
            self.calls.forget(
                ids=ids,
                external_ids=external_ids,
                filter=filter,
                all=all,
                logs=logs,
                log_filter=log_filter,
                dry_run=dry_run,
                namespace=namespace,
            )
        )

    # -- reading -------------------------------------------------------------------------------

    async def search(self, query: str, **options: Unpack[SearchOptions]) -> SearchResult:
        """Search a namespace's memories; each hit has its score and the score's breakdown."""
        return await self.send(self.calls.search(query, **options))

    async def recall(
        self, query: str, *, detail: bool = False, **options: Unpack[SearchOptions]
    ) -> Recall:
        """Search as an agent reads it: each hit's id, text, type, event time and one score
        (its relevance, rounded to 2 decimals); ``detail`` adds each hit's breakdown.
        Unless ``min_score`` says otherwise, a search whose best hit is less relevant than
        ``AGENT_MIN_SCORE`` (0.35) finds nothing: "nothing relevant" comes back empty.
        ``Recall.lines()`` is the answer in one line a hit, for a prompt."""
        return await self.send(self.calls.recall(query, detail=detail, **options))

    async def get(self, memory_id: int, *, namespace: str | None = None) -> Memory:
        return await self.send(self.calls.get(memory_id, namespace=namespace))

    async def history(
        self, memory_id: int, *, namespace: str | None = None
    ) -> tuple[RecordRef, ...]:
        """The records that touched a memory, oldest first."""
        return await self.send(self.calls.history(memory_id, namespace=namespace))

    async def relations(
        self, memory_id: int, *, namespace: str | None = None
    ) -> tuple[Relation, ...]:
        return await self.send(self.calls.relations(memory_id, namespace=namespace))

    async def list_memories(
        self, cursor: str | None = None, **options: Unpack[ListOptions]
    ) -> Page:
        """One page of memories by id (by default the active ones)."""
        return await self.send(self.calls.list_memories(cursor, **options))

    async def iter_memories(self, **options: Unpack[ListOptions]) -> AsyncIterator[Memory]:
        """Every memory the filters select, a page at a time."""
        cursor: str | None = None
        while True:
            page = await self.list_memories(cursor, **options)
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def namespaces(self) -> tuple[Namespace, ...]:
        return await self.send(self.calls.namespaces())

    # -- records, dreams, operations -----------------------------------------------------------

    async def records(self, **options: Unpack[RecordOptions]) -> tuple[Record, ...]:
        """Maintenance records, newest first."""
        return await self.send(self.calls.records(**options))

    async def record(self, record_id: int) -> RecordDetail:
        return await self.send(self.calls.record(record_id))

    async def record_diff(self, record_id: int) -> RecordDiff:
        return await self.send(self.calls.record_diff(record_id))

    async def undo(
        self, record_id: int, *, force: bool = False, cascade: bool = False
    ) -> UndoResult:
        """Put back what a record changed.

        Conflict if a later record changed the same fields or built on what it created (the
        error's details name those records); ``force`` skips the parts that conflict,
        ``cascade`` undoes those later records too, newest first, in the same undo.
        """
        return await self.send(self.calls.undo(record_id, force=force, cascade=cascade))

    async def dream(
        self,
        *,
        jobs: Sequence[str] = (),
        retry_quarantined: bool = False,
        namespace: str | None = None,
    ) -> DreamAccepted:
        """Queue a run of the maintenance jobs now."""
        return await self.send(
            self.calls.dream(jobs=jobs, retry_quarantined=retry_quarantined, namespace=namespace)
        )

    async def dream_request(self, request_id: int) -> DreamRequest:
        return await self.send(self.calls.dream_request(request_id))

    async def status(self, *, namespace: str | None = None) -> Status:
        return await self.send(self.calls.status(namespace=namespace))

    async def health(self) -> Health:
        """The server's health: each part's state (a 503 without a database is an answer too)."""
        return await self.send(self.calls.health())

    async def ready(self) -> bool:
        """Whether the server is ready for traffic (/readyz: false until its warm-up is done)."""
        return await self.send(self.calls.ready())

    async def metrics(self) -> str:
        return await self.send(self.calls.metrics())
