"""The response models, for the OpenAPI document."""

from typing import Any

from pydantic import BaseModel, Field


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
    """A maintenance record. The records endpoints give every field; a memory's history gives
    id to finished_at only."""

    id: int
    job: str
    namespace: str
    status: str
    started_at: str
    finished_at: str | None
    # Not in a memory's history (its route leaves unset fields out), so not required here;
    # RecordDetailOut (routes_records) requires them again.
    undoes_id: int | None = None
    undone_by_id: int | None = None
    duration_seconds: float | None = None
    changes_by_kind: dict[str, int] = Field(default_factory=dict)
    # What it did in words: "2 created, 1 merged", "erased 1 memory (#59)", "applied nothing".
    summary: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    dropped_count: int = 0  # items its run left out (`GET /v1/records/{id}` says which, and why)
    quarantined_count: int = 0
    error: str | None = None
    # Why the run was refused, stopped early, or its LLM part skipped.
    reason: str | None = None


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
