"""Every API call as a value: what to send, and how to read the answer. No I/O here.

``Calls`` builds a ``Call`` per endpoint (method, path, query, JSON body, headers, and the
function that reads a 2xx answer); the sync and async clients differ only in how they send it
(``secretary.client.sync``, ``secretary.client.aio``) and both finish with ``answer``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack, cast

from secretary.client.errors import Invalid, Problem, error_from
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
    UnexpectedAnswer,
    parse,
    recalled,
)

T = TypeVar("T")
OnConflict = Literal["error", "update"]
Moment = datetime | str  # an aware datetime, or ISO-8601 text


class Filters(TypedDict, total=False):
    """What search, list and forget select memories by."""

    types: Sequence[str]  # any of these types
    tags: Sequence[str]  # all of these tags
    since: Moment  # event time at or after
    until: Moment  # event time before


# The min_score an agent's recall asks for unless told otherwise: a search whose best hit is
# less relevant answers nothing. store.settings.AGENT_MIN_SCORE, chosen by bench/relevance.py
# (docs/retrieval.md#relevance); a test keeps the two equal (the client imports no store code).
AGENT_MIN_SCORE = 0.35
# The longest query the API searches (store.api.routes_search.MAX_QUERY_CHARS; a test keeps the
# two equal): the MCP tool's schema says so, so that a model learns it before it calls.
MAX_QUERY_CHARS = 4000


class SearchOptions(Filters, total=False):
    namespace: str
    k: int
    meta: Mapping[str, str]  # metadata key equal to the value, exactly
    min_score: float
    reinforce: bool  # count the search as a recall (default true)


class ListOptions(Filters, total=False):
    namespace: str
    statuses: Sequence[str]  # default: active
    meta: Mapping[str, str]
    limit: int  # per page, at most 500


class MemoryFields(TypedDict, total=False):
    """A new memory's fields besides its content."""

    type: str
    timestamp: Moment
    tags: Sequence[str]
    importance: int
    metadata: Mapping[str, Any]
    external_id: str
    session_id: str
    pinned: bool


class MemoryChanges(TypedDict, total=False):
    """What an edit may change; a field left out stays as it is."""

    content: str
    type: str
    tags: Sequence[str]
    importance: int
    metadata: Mapping[str, Any]
    event_time: Moment
    pinned: bool


class ForgetFilter(Filters, total=False):
    """Memories matching every field given."""

    metadata: Mapping[str, str | int | float | bool | None]


class LogFilter(TypedDict, total=False):
    """Conversation log lines matching every field given (a list: any one of its values)."""

    sessions: Sequence[str]
    since: Moment  # timestamp at or after
    until: Moment  # timestamp before
    keys: Sequence[str]  # idempotency keys
    match: Sequence[str]  # the text holds one, in any case


class RecordOptions(TypedDict, total=False):
    namespace: str
    job: str
    status: str
    limit: int


Params = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class Call(Generic[T]):
    """One request and how to read its answer (``read(status, body)``, for ``accept`` only)."""

    method: str
    path: str
    read: Callable[[int, bytes], T]
    params: Params = ()
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    accept: frozenset[int] = frozenset({200, 201, 202})


def answer(call: Call[T], status: int, content: bytes) -> T:
    """Given a call and the server's answer, return the value read from it.

    Raise the SecretaryError subclass for the status (its message and problems from the body)
    if the answer is not one the call accepts.
    """
    if status not in call.accept:
        raise error_from(status, content)
    return call.read(status, content)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        raise UnexpectedAnswer(f"not JSON: {content[:200]!r}") from None


def _one(cls: type[T], key: str | None = None) -> Callable[[int, bytes], T]:
    def read(_: int, content: bytes) -> T:
        data = _json(content)
        return parse(cls, data[key] if key is not None and isinstance(data, dict) else data)

    return read


def _many(cls: type[T], key: str) -> Callable[[int, bytes], tuple[T, ...]]:
    def read(_: int, content: bytes) -> tuple[T, ...]:
        data = _json(content)
        items = data.get(key) if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise UnexpectedAnswer(f"expected an object with {key!r}")
        return tuple(parse(cls, item) for item in items)

    return read


def _text(moment: Moment) -> str:
    return moment.isoformat() if isinstance(moment, datetime) else moment


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(body: Any) -> bytes:
    """Return ``body`` as JSON bytes. Raise Invalid (before anything is sent) if it is not JSON,
    e.g. NaN, an infinity or an object JSON cannot hold."""
    try:
        return json.dumps(body, allow_nan=False, default=_default, ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        problem = Problem(where="body", what=str(exc))
        raise Invalid(None, "the request is not JSON", (problem,)) from None


def _filters(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The query parameters search and list share."""
    params: list[tuple[str, str]] = []
    for name, key in (("types", "type"), ("tags", "tag"), ("statuses", "status")):
        params += [(key, str(value)) for value in options.get(name, ())]
    for name in ("since", "until"):
        if options.get(name) is not None:
            params.append((name, _text(options[name])))
    params += [("meta", f"{key}={value}") for key, value in options.get("meta", {}).items()]
    return params


def _if_match(version: int | None) -> tuple[tuple[str, str], ...]:
    return () if version is None else (("If-Match", f'"{version}"'),)


class Calls:
    """The API's endpoints as calls; ``namespace`` is the default where a call takes one."""

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace

    def _scope(self, namespace: str | None, params: Iterable[tuple[str, str]] = ()) -> Params:
        # An empty namespace is sent (and refused), never taken for "the default one".
        chosen = self.namespace if namespace is None else namespace
        return ((("namespace", chosen),) if chosen is not None else ()) + tuple(params)

    # -- writing memories and logs ----------------------------------------------------------

    def add_memories(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> Call[AddResult]:
        return self._add("/v1/memories", items, on_conflict, namespace)

    def add_memory(
        self,
        content: str,
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
        **fields: Unpack[MemoryFields],
    ) -> Call[AddResult]:
        item = {"content": content, **fields}
        return self.add_memories([item], on_conflict=on_conflict, namespace=namespace)

    def add_logs(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        on_conflict: OnConflict = "error",
        namespace: str | None = None,
    ) -> Call[AddResult]:
        return self._add("/v1/logs", items, on_conflict, namespace)

    def _add(
        self,
        path: str,
        items: Sequence[Mapping[str, Any]],
        on_conflict: OnConflict,
        namespace: str | None,
    ) -> Call[AddResult]:
        body = encode({"items": list(items), "on_conflict": on_conflict})
        return Call(
            method="POST", path=path, params=self._scope(namespace), body=body, read=_one(AddResult)
        )

    def update(
        self,
        memory_id: int,
        *,
        version: int | None = None,
        namespace: str | None = None,
        **changes: Unpack[MemoryChanges],
    ) -> Call[Edited]:
        return Call(
            method="PATCH",
            path=f"/v1/memories/{memory_id}",
            params=self._scope(namespace),
            body=encode(dict(changes)),
            headers=_if_match(version),
            read=_one(Edited),
        )

    def delete(
        self, memory_id: int, *, version: int | None = None, namespace: str | None = None
    ) -> Call[Deleted]:
        return Call(
            method="DELETE",
            path=f"/v1/memories/{memory_id}",
            params=self._scope(namespace),
            headers=_if_match(version),
            read=_one(Deleted),
        )

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
    ) -> Call[ForgetResult]:
        body: dict[str, Any] = {"ids": list(ids), "external_ids": list(external_ids)}
        if filter is not None:
            body["filter"] = dict(filter)
        if log_filter is not None:
            body["log_filter"] = {
                name: list(value) if isinstance(value, list | tuple) else value
                for name, value in log_filter.items()
            }
        body.update(all=all, logs=logs, dry_run=dry_run)
        return Call(
            method="POST",
            path="/v1/forget",
            params=self._scope(namespace),
            body=encode(body),
            read=_one(ForgetResult),
        )

    # -- reading memories -------------------------------------------------------------------

    def search(self, query: str, **options: Unpack[SearchOptions]) -> Call[SearchResult]:
        params = [("q", query), *_filters(options)]
        if "k" in options:
            params.append(("k", str(options["k"])))
        if options.get("min_score") is not None:
            params.append(("min_score", repr(options["min_score"])))
        if "reinforce" in options:
            params.append(("reinforce", "true" if options["reinforce"] else "false"))
        return Call(
            method="GET",
            path="/v1/search",
            params=self._scope(options.get("namespace"), params),
            read=_one(SearchResult),
        )

    def recall(
        self, query: str, *, detail: bool = False, **options: Unpack[SearchOptions]
    ) -> Call[Recall]:
        """The search, read as an agent's ``Recall`` (the breakdown only with ``detail``); with
        no ``min_score``, the agents' ``AGENT_MIN_SCORE``: nothing when nothing is relevant."""
        options.setdefault("min_score", AGENT_MIN_SCORE)
        search = self.search(query, **options)

        def read(status: int, content: bytes) -> Recall:
            return recalled(search.read(status, content), detail=detail)

        return Call(method=search.method, path=search.path, params=search.params, read=read)

    def get(self, memory_id: int, *, namespace: str | None = None) -> Call[Memory]:
        return Call(
            method="GET",
            path=f"/v1/memories/{memory_id}",
            params=self._scope(namespace),
            read=_one(Memory),
        )

    def history(
        self, memory_id: int, *, namespace: str | None = None
    ) -> Call[tuple[RecordRef, ...]]:
        return Call(
            method="GET",
            path=f"/v1/memories/{memory_id}/history",
            params=self._scope(namespace),
            read=_many(RecordRef, "records"),
        )

    def relations(
        self, memory_id: int, *, namespace: str | None = None
    ) -> Call[tuple[Relation, ...]]:
        return Call(
            method="GET",
            path=f"/v1/memories/{memory_id}/relations",
            params=self._scope(namespace),
            read=_many(Relation, "relations"),
        )

    def list_memories(
        self, cursor: str | None = None, **options: Unpack[ListOptions]
    ) -> Call[Page]:
        params = _filters(options)
        if cursor is not None:
            params.append(("cursor", cursor))
        if "limit" in options:
            params.append(("limit", str(options["limit"])))
        return Call(
            method="GET",
            path="/v1/memories",
            params=self._scope(options.get("namespace"), params),
            read=_one(Page),
        )

    def namespaces(self) -> Call[tuple[Namespace, ...]]:
        return Call(method="GET", path="/v1/namespaces", read=_many(Namespace, "namespaces"))

    # -- records, undo, dreams, status -------------------------------------------------------

    def records(self, **options: Unpack[RecordOptions]) -> Call[tuple[Record, ...]]:
        params = [(key, str(options[key])) for key in ("job", "status", "limit") if key in options]
        return Call(
            method="GET",
            path="/v1/records",
            params=self._scope(options.get("namespace"), params),
            read=_many(Record, "records"),
        )

    def record(self, record_id: int) -> Call[RecordDetail]:
        return Call(method="GET", path=f"/v1/records/{record_id}", read=_one(RecordDetail))

    def record_diff(self, record_id: int) -> Call[RecordDiff]:
        return Call(method="GET", path=f"/v1/records/{record_id}/diff", read=_one(RecordDiff))

    def undo(
        self, record_id: int, *, force: bool = False, cascade: bool = False
    ) -> Call[UndoResult]:
        flags = (("force", force), ("cascade", cascade))
        return Call(
            method="POST",
            path=f"/v1/records/{record_id}/undo",
            params=tuple((name, "true") for name, on in flags if on),
            read=_one(UndoResult),
        )

    def dream(
        self,
        *,
        jobs: Sequence[str] = (),
        retry_quarantined: bool = False,
        namespace: str | None = None,
    ) -> Call[DreamAccepted]:
        body = encode({"jobs": list(jobs), "retry_quarantined": retry_quarantined})
        return Call(
            method="POST",
            path="/v1/dream",
            params=self._scope(namespace),
            body=body,
            read=_one(DreamAccepted),
        )

    def dream_request(self, request_id: int) -> Call[DreamRequest]:
        return Call(method="GET", path=f"/v1/dream/{request_id}", read=_one(DreamRequest))

    def status(self, *, namespace: str | None = None) -> Call[Status]:
        def read(_: int, content: bytes) -> Status:
            data = _json(content)
            if not isinstance(data, dict) or not {"daemon", "namespaces"} <= data.keys():
                raise UnexpectedAnswer("expected the status object")
            return cast(Status, data)

        return Call(method="GET", path="/v1/status", params=self._scope(namespace), read=read)

    def health(self) -> Call[Health]:
        # 503 is an answer here: the database is unreachable, and the body says so.
        return Call(method="GET", path="/healthz", read=_one(Health), accept=frozenset({200, 503}))

    def ready(self) -> Call[bool]:
        # 503 until the start-up warm-up is done (or without a database): not ready yet.
        return Call(
            method="GET",
            path="/readyz",
            read=lambda status, _: status == 200,
            accept=frozenset({200, 503}),
        )

    def metrics(self) -> Call[str]:
        return Call(method="GET", path="/metrics", read=lambda _, content: content.decode())
