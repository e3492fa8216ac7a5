"""What the handlers share: the app's state, the caller, and the common parameters."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, cast

from fastapi import Depends, FastAPI, Path, Query, Request
from pydantic import StringConstraints, WithJsonSchema

from store.api.auth import Principal, authenticate, presented_key
from store.api.metrics import Metrics
from store.service import Store
from store.vector.workers import IndexWorker, Warmer
from store.write.reinforcement import Reinforcer

MAX_ID = 2**63 - 1  # beyond a 64-bit id the database driver itself would fail


@dataclass(frozen=True, kw_only=True)
class ApiState:
    """What the handlers share; kept on ``app.state.secretary``."""

    store: Store
    clock: Callable[[], datetime]
    reinforcer: Reinforcer
    worker: IndexWorker
    warmer: Warmer
    metrics: Metrics


def api_state(app: FastAPI) -> ApiState:
    return cast(ApiState, app.state.secretary)


def _state(request: Request) -> ApiState:
    return api_state(cast(FastAPI, request.app))


async def _principal(request: Request) -> Principal:
    keys = _state(request).store.settings.api.keys
    return authenticate(keys, presented_key(request.headers))


State = Annotated[ApiState, Depends(_state)]
Caller = Annotated[Principal, Depends(_principal)]
NamespaceParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=128,
        description="Defaults to the key's only namespace, or 'default' when no keys are set; "
        "on a route naming a memory by id, to the memory's own if the key may use it.",
    ),
]
MemoryId = Annotated[int, Path(ge=1, le=MAX_ID)]
RecordId = Annotated[int, Path(ge=1, le=MAX_ID)]
# An event time as ISO-8601 text, parsed by store.requests: a datetime parameter would also take
# "0" or "1700000000" as seconds since 1970, which the document does not allow.
IsoTime = Annotated[
    str,
    StringConstraints(min_length=1, max_length=64),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
# A metadata filter: key=value, the value compared exactly.
MetaPair = Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=r"^[^=]+=")]
