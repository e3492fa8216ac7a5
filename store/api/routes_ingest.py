"""POST /v1/memories and /v1/logs: store items idempotently; updates are recorded, undoable."""

import json
import math
from typing import Annotated, Any, cast

from fastapi import FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from loguru import logger
from pydantic import BaseModel

from store.api.auth import choose_namespace
from store.api.deps import ApiState, Caller, NamespaceParam, State
from store.api.errors import ApiError, error_response
from store.api.responses import ERRORS, AddOut, ErrorOut
from store.conflicts import ON_CONFLICT, OnConflict
from store.errors import IdConflict
from store.schemas import LogIn, MemoryIn
from store.write.writer import AddResult


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    one = model.model_json_schema()
    many = {"type": "array", "items": one, "minItems": 1}
    wrapped = {
        "type": "object",
        "properties": {"items": many, "on_conflict": {"enum": list(ON_CONFLICT)}},
        "required": ["items"],
        "additionalProperties": False,
    }
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"anyOf": [one, many, wrapped]}}},
        }
    }


OnConflictParam = Annotated[
    OnConflict | None,
    Query(
        description="What an item naming a stored id (external_id, idempotency_key) with other "
        "content does: 'error' (409, nothing written; the default) or 'update' (the stored one "
        "takes the item's fields, recorded and undoable). The body may say it too: "
        '{"items": [...], "on_conflict": "update"}.'
    ),
]


def _unwrap(
    items: list[Any], labels: list[str] | None, on_conflict: OnConflict | None
) -> tuple[list[Any], list[str] | None, OnConflict]:
    """Given a parsed body, return its items, their labels and what a conflict does: a body
    ``{"items": [...], "on_conflict": ...}`` holds its items in ``items``.

    Raise ApiError 422 if such a body is malformed or disagrees with the query.
    """
    body = items[0] if labels == ["body"] else None
    if not isinstance(body, dict) or "items" not in body:
        return items, labels, on_conflict or "error"
    problems = [(f"body.{key}", "is not a known field") for key in body if key not in WRAPPER_KEYS]
    inner, said = body["items"], body.get("on_conflict")
    if not isinstance(inner, list) or not inner:
        problems.append(("body.items", "expected a non-empty array of objects"))
    if said is not None and said not in ON_CONFLICT:
        problems.append(("body.on_conflict", f"expected one of {', '.join(ON_CONFLICT)}"))
    elif said is not None and on_conflict is not None and said != on_conflict:
        problems.append(("body.on_conflict", "disagrees with the on_conflict query parameter"))
    if problems:
        raise ApiError(422, "invalid body", problems)
    return inner, [f"items.{index}" for index in range(len(inner))], said or on_conflict or "error"


WRAPPER_KEYS = frozenset({"items", "on_conflict"})


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepting them would store values no response can carry.
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf: as unrepresentable as Infinity itself
        raise ValueError(f"the number {text} is out of range")
    return value


def parse_batch(body: bytes) -> tuple[list[Any], list[str] | None]:
    """Given a request body, return its items and their labels (None: one object, "item N").

    Raise ApiError 400 if the body is not JSON, 422 if it is neither an object nor an array.
    """
    try:
        data = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "the body is not valid JSON", [("body", str(exc))]) from None
    if isinstance(data, dict):
        return [data], ["body"]
    if isinstance(data, list):
        if not data:
            raise ApiError(422, "nothing to store", [("body", "the array is empty")])
        return data, None
    raise ApiError(422, "invalid body", [("body", "expected a JSON object or an array of objects")])


def _add_out(result: AddResult, response: Response) -> dict[str, Any]:
    # 201 when something was created; a re-post of known items is a 200 with created=[].
    response.status_code = 201 if result.created else 200
    return {
        "ids": list(result.ids),
        "created": list(result.created),
        "updated": list(result.updated),
        "record_id": result.record_id,
    }


def _ingest(
    state: ApiState,
    kind: type[MemoryIn] | type[LogIn],
    namespace: str,
    body: bytes,
    on_conflict: OnConflict | None,
) -> AddResult:
    items, labels, conflict = _unwrap(*parse_batch(body), on_conflict)
    now = state.clock()
    # A timestamp whose UTC conversion leaves year 1..9999 (e.g. 9999-12-31T23:00-05:00) is a
    # validation problem of its item (store.clock.ensure_utc raises ValueError).
    if kind is MemoryIn:
        return state.store.add_memories(
            namespace, items, now=now, labels=labels, on_conflict=conflict
        )
    return state.store.add_logs(namespace, items, now=now, labels=labels, on_conflict=conflict)


async def _conflict(_: Request, exc: Exception) -> Response:
    return error_response(409, str(exc).split(":", 1)[0], cast(IdConflict, exc).problems)


def add_ingest_routes(app: FastAPI) -> None:
    app.add_exception_handler(IdConflict, _conflict)
    responses: dict[int | str, dict[str, Any]] = {
        **ERRORS,
        200: {"model": AddOut, "description": "Every item existed already: nothing created."},
        409: {
            "model": ErrorOut,
            "description": "An item names a stored id with other content, or another item's "
            "id with other content; nothing written. Each such item is a problem.",
        },
    }

    @app.post(
        "/v1/memories",
        status_code=201,
        response_model=AddOut,
        responses=responses,
        openapi_extra=_body_schema(MemoryIn),
        summary="Store one memory or a batch (idempotent)",
    )
    async def post_memories(
        request: Request,
        response: Response,
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
        on_conflict: OnConflictParam = None,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, MemoryIn, ns, body, on_conflict)
        logger.debug("{} stored {} new memories in {}", caller.name, len(result.created), ns)
        state.metrics.memories_ingested.inc(len(result.created))
        if result.created:
            state.worker.kick()
        return _add_out(result, response)

    @app.post(
        "/v1/logs",
        status_code=201,
        response_model=AddOut,
        responses=responses,
        openapi_extra=_body_schema(LogIn),
        summary="Store one conversation log line or a batch (idempotent)",
    )
    async def post_logs(
        request: Request,
        response: Response,
        state: State,
        caller: Caller,
        namespace: NamespaceParam = None,
        on_conflict: OnConflictParam = None,
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, LogIn, ns, body, on_conflict)
        state.metrics.logs_ingested.inc(len(result.created))
        return _add_out(result, response)
