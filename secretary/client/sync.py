"""``SecretaryClient``: the API over HTTP, blocking. Each method builds its call
(``secretary.client.calls``), sends it, and returns the answer as a value or raises."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


class SecretaryClient:
    """A client of the memory-secretary API.

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
        http_client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.calls = Calls(namespace)
        self._headers = auth_headers(api_key)
        self._owned = http_client is None
        self._http = http_client or httpx.Client(base_url=self.base_url, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call and return what its answer holds; raise SecretaryError if refused."""
        headers = {**self._headers, **dict(call.headers)}
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(
                call.method, call.path, params=call.params, content=call.body, headers=headers
            )
        except httpx.InvalidURL as exc:  # e.g. a query too long for any URL: never sent
            raise Invalid(None, f"request not sent: {exc}") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        return answer(call, response.status_code, response.content)

    # -- writing -------------------------------------------------------------------------------

    def add_memory(
        self,
        content: str,
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
        **fields: Unpack[MemoryFields],
    ) -> AddResult:
        """Store one memory (idempotent by external_id, or content, session and time)."""
        return self.send(
            self.calls.add_memory(content, on_conflict=on_conflict, namespace=namespace, **fields)
        )

    def add_memories(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> AddResult:
        """Store a batch: all of it, or nothing (Invalid, Conflict) with each problem named."""
        return self.send(
            self.calls.add_memories(items, on_conflict=on_conflict, namespace=namespace)
        )

    def add_logs(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> AddResult:
        """Store conversation log lines (session_id, role, content, timestamp, ...)."""
        return self.send(self.calls.add_logs(items, on_conflict=on_conflict, namespace=namespace))

    def update(
        self,
        memory_id: int,
        *,
        version: int | None = None,
        namespace: str | None = None,
        **changes: Unpack[MemoryChanges],
    ) -> Edited:
        """Edit a memory (recorded, undoable); with ``version``, only that version (else
        StaleVersion)."""
        return self.send(
            self.calls.update(memory_id, version=version, namespace=namespace, **changes)
        )

    def delete(
        self, memory_id: int, *, version: int | None = None, namespace: str | None = None
    ) -> Deleted:
        """Delete a memory: a tombstone, undoable until retention purges it."""
        return self.send(self.calls.delete(memory_id, version=version, namespace=namespace))

    def forget(
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
        return self.send(
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

    def search(self, query: str, **options: Unpack[SearchOptions]) -> SearchResult:
        """Search a namespace's memories; each hit has its score and the score's breakdown."""
        return self.send(self.calls.search(query, **options))

    def recall(
        self, query: str, *, detail: bool = False, **options: Unpack[SearchOptions]
    ) -> Recall:
        """Search as an agent reads it: each hit's id, text, type, event time and one score
        (its relevance, rounded to 2 decimals); ``detail`` adds each hit's breakdown.
        Unless ``min_score`` says otherwise, a search whose best hit is less relevant than
        ``AGENT_MIN_SCORE`` (0.35) finds nothing: "nothing relevant" comes back empty.
        ``Recall.lines()`` is the answer in one line a hit, for a prompt."""
        return self.send(self.calls.recall(query, detail=detail, **options))

    def get(self, memory_id: int, *, namespace: str | None = None) -> Memory:
        return self.send(self.calls.get(memory_id, namespace=namespace))

    def history(self, memory_id: int, *, namespace: str | None = None) -> tuple[RecordRef, ...]:
        """The records that touched a memory, oldest first."""
        return self.send(self.calls.history(memory_id, namespace=namespace))

    def relations(self, memory_id: int, *, namespace: str | None = None) -> tuple[Relation, ...]:
        return self.send(self.calls.relations(memory_id, namespace=namespace))

    def list_memories(self, cursor: str | None = None, **options: Unpack[ListOptions]) -> Page:
        """One page of memories by id (by default the active ones)."""
        return self.send(self.calls.list_memories(cursor, **options))

    def iter_memories(self, **options: Unpack[ListOptions]) -> Iterator[Memory]:
        """Every memory the filters select, a page at a time."""
        cursor: str | None = None
        while True:
            page = self.list_memories(cursor, **options)
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def namespaces(self) -> tuple[Namespace, ...]:
        return self.send(self.calls.namespaces())

    # -- records, dreams, operations -----------------------------------------------------------

    def records(self, **options: Unpack[RecordOptions]) -> tuple[Record, ...]:
        """Maintenance records, newest first."""
        return self.send(self.calls.records(**options))

    def record(self, record_id: int) -> RecordDetail:
        return self.send(self.calls.record(record_id))

    def record_diff(self, record_id: int) -> RecordDiff:
        return self.send(self.calls.record_diff(record_id))

    def undo(self, record_id: int, *, force: bool = False, cascade: bool = False) -> UndoResult:
        """Put back what a record changed.

        Conflict if a later record changed the same fields or built on what it created (the
        error's details name those records); ``force`` skips the parts that conflict,
        ``cascade`` undoes those later records too, newest first, in the same undo.
        """
        return self.send(self.calls.undo(record_id, force=force, cascade=cascade))

    def dream(
        self,
        *,
        jobs: Sequence[str] = (),
        retry_quarantined: bool = False,
        namespace: str | None = None,
    ) -> DreamAccepted:
        """Queue a run of the maintenance jobs now."""
        return self.send(
            self.calls.dream(jobs=jobs, retry_quarantined=retry_quarantined, namespace=namespace)
        )

    def dream_request(self, request_id: int) -> DreamRequest:
        return self.send(self.calls.dream_request(request_id))

    def status(self, *, namespace: str | None = None) -> Status:
        return self.send(self.calls.status(namespace=namespace))

    def health(self) -> Health:
        """The server's health: each part's state (a 503 without a database is an answer too)."""
        return self.send(self.calls.health())

    def ready(self) -> bool:
        """Whether the server is ready for traffic (/readyz: false until its warm-up is done)."""
        return self.send(self.calls.ready())

    def metrics(self) -> str:
        return self.send(self.calls.metrics())
