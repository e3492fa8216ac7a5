"""GET /v1/memories/{id} and its history: one memory, by id, within the caller's namespaces."""

from typing import Any

from fastapi import FastAPI, Response

from store.api.auth import Principal, choose_namespace
from store.api.deps import ApiState, Caller, MemoryId, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, HistoryOut, MemoryDetailOut
from store.shapes.memory import memory_json
from store.views import RecordView


def memory_not_found(memory_id: int) -> ApiError:
    """The one 404 for a memory, whether it is missing or belongs to a namespace the key lacks."""
    return ApiError(
        404, f"memory {memory_id} does not exist", [("path.memory_id", "no such memory")]
    )


def readable_namespace(
    state: ApiState, caller: Principal, namespace: str | None, memory_id: int
) -> str:
    """The namespace named, or else the memory's own if the key may use it; a forbidden
    namespace looks exactly like a missing memory (404)."""
    if namespace is None:
        found = state.store.db.memories.namespace_of(memory_id)
        if found is None or not caller.allows(found):
            raise memory_not_found(memory_id)
        return found
    try:
        return choose_namespace(caller, namespace)
    except ApiError as exc:
        if exc.status == 403:
            raise memory_not_found(memory_id) from None
        raise


def _record_view(record: RecordView) -> dict[str, Any]:
    return {
        "id": record.id,
        "job": record.job,
        "namespace": record.namespace,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }


def add_memory_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/memories/{memory_id}",
        response_model=MemoryDetailOut,
        responses=ERRORS,
        summary="One memory",
    )
    def get_memory(
        state: State,
        caller: Caller,
        memory_id: MemoryId,
        response: Response,
        namespace: NamespaceParam = None,
    ) -> dict[str, Any]:
        ns = readable_namespace(state, caller, namespace, memory_id)
        memory = state.store.db.memories.get(ns, memory_id)
        if memory is None:
            raise memory_not_found(memory_id)
        response.headers["ETag"] = f'"{memory.version}"'  # PATCH and DELETE take it as If-Match
        return memory_json(memory, detail=True)

    @app.get(
        "/v1/memories/{memory_id}/history",
        response_model=HistoryOut,
        # A record here is its first fields only (_record_view): RecordOut's others left out.
        response_model_exclude_unset=True,
        responses=ERRORS,
        summary="The maintenance records that touched a memory, oldest first",
    )
    def get_history(
        state: State, caller: Caller, memory_id: MemoryId, namespace: NamespaceParam = None
    ) -> dict[str, Any]:
        ns = readable_namespace(state, caller, namespace, memory_id)
        if state.store.db.memories.get(ns, memory_id) is None:
            raise memory_not_found(memory_id)
        records = state.store.db.records.history(ns, memory_id)
        return {"memory_id": memory_id, "records": [_record_view(r) for r in records]}
