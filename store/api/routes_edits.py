"""PATCH and DELETE /v1/memories/{id}, POST /v1/forget, POST /v1/records/{id}/undo: corrections.

An edit and a delete are records of their own (undoable, in the memory's history); send the
version you read as ``If-Match`` to change only that version (409 otherwise). A forget erases
content (memories, log lines) for good; ``"dry_run": true`` lists what it would erase. Undo
takes back any record of the key's namespaces (a job's run, an ingest, an edit, a delete).
"""

import json
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from store.api.auth import Principal, choose_namespace
from store.api.deps import MAX_ID, Caller, MemoryId, NamespaceParam, State
from store.api.errors import ApiError
from store.api.responses import ERRORS, ErrorOut, MemoryDetailOut
from store.api.routes_memories import memory_not_found, readable_namespace
from store.errors import NotFound
from store.requests import SearchFilters
from store.schemas import NOT_BLANK, Key, MemoryPatch, Tag, Timestamp, TypeName
from store.shapes.memory import memory_json
from store.write.edits import Edited, NotActive, VersionConflict
from store.write.forget import ForgetSelection, LogFilter
from store.write.undo import (
    AlreadyUndone,
    ForgetIsFinal,
    NothingToUndo,
    UndoConflict,
    undo,
)

CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "the memory changed (If-Match) or is not active"}
}

IfMatch = Annotated[
    str | None,
    Header(
        description="The memory's version as you read it (GET gives it as `version` and in the "
        "ETag header): the change applies only to that version, else 409 and nothing changes.",
        pattern=r'^\s*(\*|(W/)?"?[0-9]{1,18}"?)\s*$',
    ),
]


def etag(version: int) -> str:
    return f'"{version}"'


def expected_version(if_match: str | None) -> int | None:
    """Given an If-Match header, return the version it names (None: any). Raise 422 if it
    names none."""
    if if_match is None or if_match.strip() == "*":
        return None
    text = if_match.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 18:
        raise ApiError(
            422,
            "If-Match names no version",
            [("header.if-match", 'expected the memory\'s version, as its ETag gives it: "3"')],
        )
    return int(text)


def _refused(exc: Exception, memory_id: int) -> ApiError:
    if isinstance(exc, NotFound):
        return memory_not_found(memory_id)
    if isinstance(exc, VersionConflict):
        return ApiError(409, str(exc), [("header.if-match", f"now at version {exc.current}")])
    return ApiError(409, str(exc), [("path.memory_id", "not active")])


class EditOut(BaseModel):
    memory: MemoryDetailOut
    record_id: int | None  # None: the edit changed nothing


class DeleteOut(BaseModel):
    id: int
    status: str
    record_id: int


class ForgetFilter(BaseModel):
    """Memories matching every field given (as search's filters)."""

    model_config = ConfigDict(extra="forbid")

    types: list[TypeName] = Field(default_factory=list, max_length=64)
    tags: list[Tag] = Field(default_factory=list, max_length=64)
    since: Timestamp | None = None
    until: Timestamp | None = None
    metadata: dict[str, str | int | float | bool | None] = Field(default_factory=dict)

    def filters(self) -> SearchFilters:
        pairs = tuple(
            (key, value if isinstance(value, str) else json.dumps(value))
            for key, value in sorted(self.metadata.items())
        )
        return SearchFilters(
            types=tuple(self.types),
            tags=tuple(self.tags),
            since=self.since,
            until=self.until,
            metadata=pairs,
        )


class LogFilterIn(BaseModel):
    """Conversation log lines meeting every field given (a list: any one of its values): of
    these sessions, timestamped at or after ``since`` and before ``until``, with these
    idempotency keys (404 for one not stored), whose text holds a ``match`` in any case."""

    model_config = ConfigDict(extra="forbid")

    sessions: list[Key] = Field(default_factory=list, max_length=1000)
    since: Timestamp | None = None
    until: Timestamp | None = None
    keys: list[Key] = Field(default_factory=list, max_length=10_000)
    match: list[Annotated[str, Field(max_length=1000, pattern=NOT_BLANK)]] = Field(
        default_factory=list, max_length=100
    )

    def log_filter(self) -> LogFilter:
        values: dict[str, Any] = {n: tuple(v) if isinstance(v, list) else v for n, v in self}
        return LogFilter(**values)


class ForgetIn(BaseModel):
    """What to forget; name at least one of ids, external_ids, filter, log_filter or all."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[int, Field(ge=1, le=2**63 - 1)]] = Field(
        default_factory=list, max_length=10_000
    )
    external_ids: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=10_000
    )
    filter: ForgetFilter | None = None
    all: StrictBool = Field(default=False, description="Every memory of the namespace.")
    logs: StrictBool = Field(
        default=False, description="Also the log lines the memories came from (all: every one)."
    )
    log_filter: LogFilterIn | None = None  # lines, with what was extracted from them
    dry_run: StrictBool = Field(default=False, description="List what would go; erase nothing.")

    def selection(self) -> ForgetSelection:
        return ForgetSelection(
            ids=tuple(self.ids),
            external_ids=tuple(self.external_ids),
            filters=self.filter.filters() if self.filter is not None else None,
            everything=self.all,
            logs=self.logs,
            log_filter=self.log_filter.log_filter() if self.log_filter is not None else None,
        )


class ForgottenOut(BaseModel):
    id: int
    content_hash: str
    why: str


class ForgetOut(BaseModel):
    dry_run: bool
    record_id: int | None  # the erasure record; None for a dry run
    memories: list[ForgottenOut]
    relations: int
    logs: int
    log_ids: list[int]
    # SQL erased them, but the vector index has not let them go yet (the next sync does);
    # the warning says why.
    index_pending: bool = False
    warning: str | None = None


class SkippedOut(BaseModel):
    kind: str
    target_id: int
    reason: str


class UndoOut(BaseModel):
    record_id: int | None  # the undo's own record (undo it to redo); None: nothing to undo
    undone_id: int
    restored: int
    skipped: list[SkippedOut]  # conflicting parts left as they are (force=true only)
    cascaded: list[int] = []  # later records undone with it, newest first (cascade=true)
    # The record changed nothing undo could restore: not a failure, nothing written.
    nothing_to_undo: str | None = None


def _edited_out(state: Any, namespace: str, done: Edited, response: Response) -> dict[str, Any]:
    memory = state.store.db.memories.get(namespace, done.memory_id)
    assert memory is not None  # just written, under this namespace
    response.headers["ETag"] = etag(memory.version)
    return {"memory": memory_json(memory, detail=True), "record_id": done.record_id}


def _by(caller: Principal) -> str:
    return f"api:{caller.name}"


def add_edit_routes(app: FastAPI) -> None:
    @app.patch(
        "/v1/memories/{memory_id}",
        response_model=EditOut,
        responses={**ERRORS, **CONFLICT},
        summary="Edit a memory (recorded, undoable)",
    )
    def edit_memory(
        state: State,
        caller: Caller,
        memory_id: MemoryId,
        patch: MemoryPatch,
        response: Response,
        namespace: NamespaceParam = None,
        if_match: IfMatch = None,
    ) -> dict[str, Any]:
        ns = readable_namespace(state, caller, namespace, memory_id)
        expected = expected_version(if_match)
        try:
            done = state.store.edit(
                ns,
                memory_id,
                patch.model_dump(exclude_none=True),
                now=state.clock(),
                expected_version=expected,
                by=_by(caller),
            )
        except (NotFound, NotActive, VersionConflict) as exc:
            raise _refused(exc, memory_id) from None
        return _edited_out(state, ns, done, response)

    @app.delete(
        "/v1/memories/{memory_id}",
        response_model=DeleteOut,
        responses={**ERRORS, **CONFLICT},
        summary="Delete a memory: a tombstone, undoable until retention purges it",
    )
    def delete_memory(
        state: State,
        caller: Caller,
        memory_id: MemoryId,
        namespace: NamespaceParam = None,
        if_match: IfMatch = None,
    ) -> dict[str, Any]:
        ns = readable_namespace(state, caller, namespace, memory_id)
        expected = expected_version(if_match)
        try:
            done = state.store.delete(
                ns, memory_id, now=state.clock(), expected_version=expected, by=_by(caller)
            )
        except (NotFound, NotActive, VersionConflict) as exc:
            raise _refused(exc, memory_id) from None
        return {"id": memory_id, "status": "deleted", "record_id": done.record_id}

    @app.post(
        "/v1/forget",
        response_model=ForgetOut,
        responses=ERRORS,
        summary="Erase memories and log lines everywhere (an erasure request); cannot be undone",
    )
    def forget(
        state: State, caller: Caller, request: ForgetIn, namespace: NamespaceParam = None
    ) -> dict[str, Any]:
        ns = choose_namespace(caller, namespace)
        try:
            result = state.store.forget(
                ns,
                request.selection(),
                now=state.clock(),
                by=_by(caller),
                dry_run=request.dry_run,
            )
        except NotFound as exc:
            raise ApiError(404, str(exc), [("body", str(exc))]) from None
        plan = result.plan
        return {
            "dry_run": request.dry_run,
            "record_id": result.record_id,
            "memories": [
                {"id": m.id, "content_hash": m.content_hash, "why": m.why} for m in plan.memories
            ],
            "relations": len(plan.relations),
            "logs": len(plan.logs),
            "log_ids": list(plan.logs),
            "index_pending": getattr(result, "index_pending", False),
            "warning": getattr(result, "warning", None),
        }

    @app.post(
        "/v1/records/{record_id}/undo",
        response_model=UndoOut,
        responses={
            **ERRORS,
            409: {"model": ErrorOut, "description": "conflicts, already undone, or a forget"},
        },
        summary="Undo a record: put back what it changed, as a record of its own",
    )
    def undo_record(
        state: State,
        caller: Caller,
        record_id: Annotated[int, Path(ge=1, le=MAX_ID)],
        force: Annotated[
            bool,
            Query(
                description="Apply the parts that do not conflict, skip the rest (with cascade:"
                " the parts no later record explains, such as what an erasure made final)."
            ),
        ] = False,
        cascade: Annotated[
            bool,
            Query(
                description="Also undo the later records that depend on it (a refusal names"
                " them in its details), newest first, in one transaction and one undo record."
            ),
        ] = False,
    ) -> dict[str, Any]:
        try:
            state.store.db.records.get(record_id, namespaces=caller.namespaces)
            done = undo(
                state.store.db.writer, record_id, now=state.clock(), force=force, cascade=cascade
            )
        except NotFound:
            raise ApiError(
                404, f"record {record_id} does not exist", [("path.record_id", "no such record")]
            ) from None
        except UndoConflict as exc:
            raise ApiError(
                409,
                str(exc),
                [(f"{c.kind}.{c.target_id}", c.describe()) for c in exc.conflicts]
                + [
                    (f"record.{d.record_id}", f"depends on it: {d.describe()}")
                    for d in exc.dependents
                ],
            ) from None
        except NothingToUndo as exc:
            return {
                "record_id": None,
                "undone_id": record_id,
                "restored": 0,
                "skipped": [],
                "nothing_to_undo": str(exc),
            }
        except (AlreadyUndone, ForgetIsFinal) as exc:
            raise ApiError(409, str(exc), [("path.record_id", str(exc))]) from None
        return {
            "record_id": done.record_id,
            "undone_id": done.undone_id,
            "restored": done.restored,
            "skipped": [
                {"kind": c.kind, "target_id": c.target_id, "reason": c.describe()}
                for c in done.skipped
            ],
            "cascaded": list(done.cascaded),
        }
