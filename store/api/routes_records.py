"""GET /v1/records, /v1/records/{id} and /v1/records/{id}/diff: maintenance records, one record
with its operations, and a readable account of what it changed.

``records_access`` identifies the caller with the app's own key check; a key sees only the
records of its namespaces, and any other record answers 404 exactly as a missing one does, so
record ids leak nothing about other namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict

from store.api.auth import authenticate, presented_key
from store.api.deps import RecordId, api_state
from store.api.responses import ERRORS, RecordOut
from store.errors import NotFound
from store.kinds import RecordStatus
from store.reads.memories import MemoryReads
from store.reads.records import RecordReads
from store.shapes.diff import diff_json, record_diff
from store.shapes.records import record_show_json, record_summary_json
from store.views import OperationView, RecordView

MAX_LIMIT = 500


@dataclass(frozen=True, kw_only=True)
class RecordsAccess:
    """The store's records and the namespaces the caller may read (None: every one)."""

    records: RecordReads
    memories: MemoryReads
    namespaces: tuple[str, ...] | None

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


def records_access(request: Request) -> RecordsAccess:
    """Resolve the caller with the app's key check (401 on a missing or unknown key)."""
    state = api_state(cast(FastAPI, request.app))
    principal = authenticate(state.store.settings.api.keys, presented_key(request.headers))
    db = state.store.db
    return RecordsAccess(records=db.records, memories=db.memories, namespaces=principal.namespaces)


Access = Annotated[RecordsAccess, Depends(records_access)]
Text = Annotated[str | None, Query(min_length=1, max_length=128)]


class RecordsOut(BaseModel):
    records: list[RecordOut]


class OperationOut(BaseModel):
    seq: int
    op: str
    target_kind: str
    target_id: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class DroppedOut(BaseModel):
    item: str
    reason: str


class RecordDetailOut(RecordOut):
    # One record has every field of RecordOut, those a memory's history leaves out too: in the
    # document, every field of this model is required.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    model: str | None
    prompts: list[dict[str, Any]]
    stats: dict[str, Any]
    operations: list[OperationOut]
    dropped: list[DroppedOut]
    quarantined: list[int]


class DiffEntryOut(BaseModel, extra="allow"):
    kind: str
    line: str
    ids: list[int]
    details: list[str]


class DiffOut(BaseModel):
    record: dict[str, Any]
    changes_by_kind: dict[str, int]
    entries: list[DiffEntryOut]
    lines: list[str]


def _get(access: RecordsAccess, record_id: int) -> tuple[RecordView, list[OperationView]]:
    try:
        return access.records.get(record_id, namespaces=access.namespaces)
    except NotFound:
        raise HTTPException(404, f"record {record_id} does not exist") from None


def add_record_routes(app: FastAPI) -> None:
    @app.get(
        "/v1/records",
        response_model=RecordsOut,
        responses=ERRORS,
        tags=["records"],
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
        found = access.records.find(
            namespaces=namespaces,
            job=job,
            status=status.value if status is not None else None,
            limit=limit,
        )
        changes = access.records.change_counts(record.id for record in found)
        return {
            "records": [record_summary_json(record, changes.get(record.id, {})) for record in found]
        }

    @app.get(
        "/v1/records/{record_id}",
        response_model=RecordDetailOut,
        responses=ERRORS,
        tags=["records"],
        summary="One maintenance record with its operations and their before/after images",
    )
    def show_record(access: Access, record_id: RecordId) -> dict[str, Any]:
        return record_show_json(*_get(access, record_id))

    @app.get(
        "/v1/records/{record_id}/diff",
        response_model=DiffOut,
        responses=ERRORS,
        tags=["records"],
        summary="What one maintenance record changed, told readably (texts before -> after)",
    )
    def diff_record(access: Access, record_id: RecordId) -> dict[str, Any]:
        record, operations = _get(access, record_id)
        memories, namespace = access.memories, record.namespace
        diff = record_diff(record, operations, lambda ids: memories.texts(namespace, ids))
        return diff_json(diff)
