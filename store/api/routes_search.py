"""GET /v1/search: a namespace's memories for a query, with filters from query parameters."""

from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import StringConstraints

from store.api.auth import choose_namespace
from store.api.deps import Caller, IsoTime, MetaPair, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, ErrorOut, SearchOut
from store.errors import ValidationFailed
from store.requests import search_request
from store.schemas import NOT_BLANK, TypeName
from store.shapes.memory import hit_json
from store.vector.index import VectorIndexError

MAX_QUERY_CHARS = 4000

Tag = Annotated[str, StringConstraints(min_length=1, max_length=256)]


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
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NOT_BLANK)],
        namespace: NamespaceParam = None,
        k: Annotated[int, Query(ge=1, le=max_k)] = min(10, max_k),
        type_: Annotated[list[TypeName] | None, Query(alias="type")] = None,
        tag: Annotated[list[Tag] | None, Query()] = None,
        since: Annotated[IsoTime | None, Query(description="ISO-8601")] = None,
        until: Annotated[IsoTime | None, Query(description="ISO-8601")] = None,
        meta: Annotated[list[MetaPair] | None, Query(description="key=value, exact match")] = None,
        min_score: Annotated[
            float | None,
            Query(
                allow_inf_nan=False,
                ge=0,
                le=1,
                description="answer no hits unless the best is at least this relevant (0-1)",
            ),
        ] = None,
        reinforce: bool = True,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        try:
            request = search_request(
                namespace=ns,
                query=q,
                k=k,
                types=type_ or (),
                tags=tag or (),
                since=since,
                until=until,
                meta=meta or (),
                min_score=min_score,
                reinforce=reinforce,
            )
        except ValidationFailed as exc:
            problems = [(f"query.{where}", what) for where, what in exc.problems]
            raise ApiError(422, "invalid request", problems) from None
        try:
            result = state.store.search(request, now=state.clock())
        except VectorIndexError as exc:
            raise ApiError(503, "the vector index is unavailable", [("index", str(exc))]) from None
        state.metrics.searches.inc()
        return {"hits": [hit_json(hit) for hit in result.hits], "degraded": list(result.degraded)}
