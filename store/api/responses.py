"""The response models, for the OpenAPI document."""

from typing import Any

from pydantic import BaseModel


class ErrorOut(BaseModel):
    error: dict[str, Any]


class AddOut(BaseModel):
    ids: list[int]
    created: list[int]
    updated: list[int]  # stored ones given an item's other content (on_conflict=update)
    record_id: int | None


class MemoryOut(BaseModel):
    id: int
    external_id: str | None
    content: str
    type: str
    tags: list[str]
    importance: int
    event_time: str
    session_id: str | None
    metadata: dict[str, Any]


class MemoryDetailOut(MemoryOut):
    namespace: str
    status: str
    version: int  # send it back as If-Match to edit or delete only what you read
    replaced_by: int | None  # the memory that took its place (superseded, merged)
    pinned: bool
    source: str
    base_importance: float
    access_count: int
    last_accessed: str | None
    created_at: str
    updated_at: str


class HitOut(MemoryOut):
    score: float
    breakdown: dict[str, float]
    via: str


class SearchOut(BaseModel):
    hits: list[HitOut]
    degraded: list[str]


class RecordOut(BaseModel):
    # The records router has a RecordOut too; the OpenAPI document then names each after its
    # module, and this one kept the name it had before store.api became a package.
    __module__ = "store.api"

    id: int
    job: str
    namespace: str
    status: str
    started_at: str
    finished_at: str | None


class HistoryOut(BaseModel):
    memory_id: int
    records: list[RecordOut]


class RebuildOut(BaseModel):
    namespace: str
    phase: str  # "copying", then "promoting"
    copied: int
    total: int


class MiscountOut(BaseModel):
    namespace: str
    memories: int
    vectors: int


class VectorIndexOut(BaseModel):
    # ok, unchecked (not tried yet), unreachable, rebuilding, miscounted or behind
    status: str
    reachable: bool | None
    error: str | None
    outbox: int
    rebuilding: list[RebuildOut]
    miscounted: list[MiscountOut]


class LexicalIndexOut(BaseModel):
    status: str  # "warm" or "warming"
    warm: bool


class HealthOut(BaseModel):
    status: str  # "ok", "degraded" (a part is down or incomplete) or "error" (no database)
    database: str
    vector_index: VectorIndexOut
    lexical_index: LexicalIndexOut
    outbox: int | None
    # False while the start-up warm-up still loads indexes (first searches are slower).
    warm: bool


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422)
}
