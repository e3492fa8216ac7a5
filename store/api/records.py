"""The records API: maintenance records, and one record with its operations (a FastAPI router).

The app includes ``router``. ``records_access`` identifies the caller with the app's own key
check; a key sees only the records of its namespaces, and any other record answers 404 exactly
as a missing one does, so record ids leak nothing about other namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from pydantic import BaseModel

from store.api.auth import authenticate, presented_key
from store.api.deps import MAX_ID, api_state
from store.errors import NotFound
from store.models import RecordStatus
from store.records_view import find_records, get_record, record_detail_json, record_json
from store.repository import Repository

MAX_LIMIT = 500


@dataclass(frozen=True, kw_only=True)
class RecordsAccess:
    """The store's repository and the namespaces the caller may read (None: every one)."""

    repository: Repository
    namespaces: tuple[str, ...] | None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


def records_access(request: Request) -> RecordsAccess:
    """Resolve the caller with the app's key check (401 on a missing or unknown key)."""
    state = api_state(cast(FastAPI, request.app))
    principal = authenticate(state.store.settings.api.keys, presented_key(request.headers))
    return RecordsAccess(repository=state.store.repository, namespaces=principal.namespaces)


Access = Annotated[RecordsAccess, Depends(records_access)]
RecordId = Annotated[int, Path(ge=1, le=MAX_ID)]
Text = Annotated[str | None, Query(min_length=1, max_length=128)]


class RecordOut(BaseModel):
    # store.api.responses has a RecordOut too; the OpenAPI document then names each after its
    # module, and this one kept the name it had as store/api_records.py.
    __module__ = "store.api_records"

    id: int
    job: str
    namespace: str
    status: str
    started_at: str
    finished_at: str | None
    undoes_id: int | None
    undone_by_id: int | None


class RecordsOut(BaseModel):
    records: list[RecordOut]


class OperationOut(BaseModel):
    seq: int
    op: str
    target_kind: str
    target_id: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class RecordDetailOut(RecordOut):
    model: str | None
    prompts: list[dict[str, Any]]
    tokens_in: int
    tokens_out: int
    cost: float | None
    stats: dict[str, Any]
    error: str | None
    operations: list[OperationOut]


router = APIRouter(tags=["records"])


@router.get(
    "/v1/records",
    response_model=RecordsOut,
    summary="Maintenance records of the key's namespaces, newest first",
)
def list_records(
    access: Access,
    namespace: Text = None,
    job: Text = None,
    status: RecordStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
) -> dict[str, Any]:
    if namespace is not None and not access.allows(namespace):
        # Another key's namespace has no records, as far as this key can tell.
        return {"records": []}
    namespaces = (namespace,) if namespace is not None else access.namespaces
    found = find_records(
        access.repository,
        namespaces=namespaces,
        job=job,
        status=status.value if status is not None else None,
        limit=limit,
    )
    return {"records": [record_json(record) for record in found]}


@router.get(
    "/v1/records/{record_id}",
    response_model=RecordDetailOut,
    summary="One maintenance record with its operations and their before/after images",
)
def show_record(access: Access, record_id: RecordId) -> dict[str, Any]:
    try:
        record, operations = get_record(access.repository, record_id, namespaces=access.namespaces)
    except NotFound:
        raise HTTPException(404, f"record {record_id} does not exist") from None
    return record_detail_json(record, operations)
