"""GET /v1/memories (a page of a namespace's memories), /v1/memories/{id}/relations and
/v1/namespaces: listing, within the caller's namespaces."""

from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import BaseModel

from store.api.auth import choose_namespace
from store.api.deps import Caller, IsoTime, MemoryId, MetaPair, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, MemoryDetailOut
from store.api.routes_memories import memory_not_found, readable_namespace
from store.api.routes_search import Tag
from store.errors import ValidationFailed
from store.kinds import MemoryStatus
from store.listing import DEFAULT_LIMIT, MAX_LIMIT, list_memories, list_request
from store.schemas import TypeName
from store.shapes.memory import memory_json, namespace_json, relation_json


class ListOut(BaseModel):
    memories: list[MemoryDetailOut]
    # Pass it as ?cursor= for the next page; null: this was the last one. A page may hold fewer
    # memories than the limit (a filter on tags or metadata kept few) and still have a next.
    next_cursor: str | None


class RelationOut(BaseModel):
    id: int
    direction: str  # "out": this memory is the source, "in": the target
    other_id: int
    other_type: str
    other_status: str
    other_content: str
    type: str
    strength: float
    description: str
    created_at: str


class RelationsOut(BaseModel):
    memory_id: int
    relations: list[RelationOut]


class NamespaceOut(BaseModel):
    namespace: str
    memories: int  # active
    retired: int  # superseded, merged, archived or deleted (until retention purges them)
    logs: int


class NamespacesOut(BaseModel):
    namespaces: list[NamespaceOut]


def add_listing_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/memories",
        response_model=ListOut,
        responses=ERRORS,
        summary="A page of a namespace's memories, by id (by default the active ones)",
    )
    def list_page(
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
        type_: Annotated[list[TypeName] | None, Query(alias="type")] = None,
        tag: Annotated[list[Tag] | None, Query(description="all of them")] = None,
        status: Annotated[
            list[MemoryStatus] | None, Query(description="any of them; default: active")
        ] = None,
        since: Annotated[IsoTime | None, Query(description="event time, ISO-8601")] = None,
        until: Annotated[IsoTime | None, Query(description="event time, ISO-8601")] = None,
        meta: Annotated[list[MetaPair] | None, Query(description="key=value, exact match")] = None,
        cursor: Annotated[
            str | None, Query(min_length=1, max_length=512, description="next_cursor of a page")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        try:
            request = list_request(
                namespace=ns,
                types=type_ or (),
                tags=tag or (),
                statuses=[s.value for s in status or ()],
                since=since,
                until=until,
                meta=meta or (),
                cursor=cursor,
                limit=limit,
            )
        except ValidationFailed as exc:
            problems = [(f"query.{where}", what) for where, what in exc.problems]
            raise ApiError(422, "invalid request", problems) from None
        listed = list_memories(state.store.db, request)
        return {
            "memories": [memory_json(m, detail=True) for m in listed.page.memories],
            "next_cursor": listed.next_cursor,
        }

    @app.get(
        "/v1/memories/{memory_id}/relations",
        response_model=RelationsOut,
        responses=ERRORS,
        summary="A memory's relations, both ways, with the memory at the other end",
    )
    def relations(
        state: State, caller: Caller, memory_id: MemoryId, namespace: NamespaceParam = None
    ) -> dict[str, Any]:
        ns = readable_namespace(state, caller, namespace, memory_id)
        if state.store.db.memories.get(ns, memory_id) is None:
            raise memory_not_found(memory_id)
        views = state.store.db.listing.relations(ns, memory_id)
        return {"memory_id": memory_id, "relations": [relation_json(r) for r in views]}

    @app.get(
        "/v1/namespaces",
        response_model=NamespacesOut,
        responses=ERRORS,
        summary="The key's namespaces (an open API: every one holding memories or logs)",
    )
    def namespaces(state: State, caller: Caller) -> dict[str, Any]:
        views = state.store.db.listing.namespaces(caller.namespaces)
        return {"namespaces": [namespace_json(view) for view in views]}
