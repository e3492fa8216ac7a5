"""POST /v1/memories and /v1/logs: store one item or a batch, idempotently."""

import json
import math
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from loguru import logger
from pydantic import BaseModel

from store.api.auth import choose_namespace
from store.api.deps import ApiState, Caller, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, AddOut
from store.repository import AddResult
from store.schemas import LogIn, MemoryIn


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    one = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"anyOf": [one, {"type": "array", "items": one}]}}
            },
        }
    }


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
    return {"ids": list(result.ids), "created": list(result.created), "record_id": result.record_id}


def _ingest(
    state: ApiState, kind: type[MemoryIn] | type[LogIn], namespace: str, body: bytes
) -> AddResult:
    items, labels = parse_batch(body)
    now = state.clock()
    # A timestamp whose UTC conversion leaves year 1..9999 (e.g. 9999-12-31T23:00-05:00) is a
    # validation problem of its item (secretary.clock.ensure_utc raises ValueError).
    if kind is MemoryIn:
        return state.store.add_memories(namespace, items, now=now, labels=labels)
    return state.store.add_logs(namespace, items, now=now, labels=labels)


def add_ingest_routes(app: FastAPI) -> None:
    responses: dict[int | str, dict[str, Any]] = {
        **ERRORS,
        200: {"model": AddOut, "description": "Every item existed already: nothing created."},
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
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, MemoryIn, ns, body)
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
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        body = await request.body()
        result = await run_in_threadpool(_ingest, state, LogIn, ns, body)
        state.metrics.logs_ingested.inc(len(result.created))
        return _add_out(result, response)
