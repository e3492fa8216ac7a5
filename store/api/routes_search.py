"""GET /v1/search: a namespace's memories for a query, with filters from query parameters."""

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import StringConstraints

from secretary.clock import ensure_utc
from store.api.auth import choose_namespace
from store.api.deps import Caller, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, ErrorOut, SearchOut
from store.memory_view import hit_json
from store.schemas import TYPE_PATTERN
from store.search import SearchFilters, SearchRequest
from store.vector_index import VectorIndexError

MAX_QUERY_CHARS = 4000

TypeName = Annotated[str, StringConstraints(pattern=TYPE_PATTERN)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=256)]


def parse_meta(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Given ``key=value`` strings, return (key, value) pairs. Raise ApiError 422 if malformed."""
    out: list[tuple[str, str]] = []
    problems: list[tuple[str, str]] = []
    for index, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            problems.append((f"query.meta.{index}", f"expected key=value, got {pair!r}"))
        else:
            out.append((key, value))
    if problems:
        raise ApiError(422, "invalid request", problems)
    return tuple(out)


def _utc_bound(name: str, value: datetime | None) -> datetime | None:
    try:
        return None if value is None else ensure_utc(value)
    except ValueError:
        raise ApiError(422, "invalid request", [(f"query.{name}", "out of range")]) from None


def make_filters(
    *,
    types: Sequence[str],
    tags: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    meta: Sequence[str],
) -> SearchFilters:
    """Build the search filters from query parameters. Raise ApiError 422 if inconsistent."""
    start, end = _utc_bound("since", since), _utc_bound("until", until)
    if start is not None and end is not None and start > end:
        raise ApiError(422, "invalid request", [("query.since", "is after until")])
    return SearchFilters(
        types=tuple(types), tags=tuple(tags), since=start, until=end, metadata=parse_meta(meta)
    )


def add_search_route(app: FastAPI, max_k: int) -> None:
    @app.get(
        "/v1/search",
        response_model=SearchOut,
        responses={**ERRORS, 503: {"model": ErrorOut}},
        summary="Search a namespace's memories",
    )
    def search(
        state: State,
        caller: Caller,
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
        namespace: NamespaceParam = None,
        k: Annotated[int, Query(ge=1, le=max_k)] = min(10, max_k),
        type_: Annotated[list[TypeName] | None, Query(alias="type")] = None,
        tag: Annotated[list[Tag] | None, Query()] = None,
        since: Annotated[datetime | None, Query(description="ISO-8601")] = None,
        until: Annotated[datetime | None, Query(description="ISO-8601")] = None,
        meta: Annotated[list[str] | None, Query(description="key=value, exact match")] = None,
        min_score: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        reinforce: bool = True,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        if not q.strip():
            raise ApiError(422, "invalid request", [("query.q", "is blank")])
        filters = make_filters(
            types=type_ or (), tags=tag or (), since=since, until=until, meta=meta or ()
        )
        request = SearchRequest(
            namespace=ns, query=q, k=k, filters=filters, min_score=min_score, reinforce=reinforce
        )
        now = state.clock()
        try:
            result = state.store.searcher.search(request, now=now)
        except VectorIndexError as exc:
            raise ApiError(503, "the vector index is unavailable", [("index", str(exc))]) from None
        state.metrics.searches.inc()
        if reinforce and result.hits:
            state.reinforcer.record((hit.memory.id for hit in result.hits), now)
        return {"hits": [hit_json(hit) for hit in result.hits], "degraded": list(result.degraded)}
