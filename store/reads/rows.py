"""Turning ORM rows into frozen views."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row

from store.models import MaintenanceOperation, MaintenanceRecord, Memory
from store.views import MemoryView, OperationView, RecordView

# Every column of a memory, labelled with its ORM attribute's name ("metadata_"), so that a Core
# row of them reads like a Memory object: `memory_view` takes either.
MEMORY_COLUMNS = tuple(
    column.label(Memory.__mapper__.get_property_by_column(column).key)
    for column in Memory.__table__.columns
)


def memory_view(row: Memory | Row[Any]) -> MemoryView:
    return MemoryView(
        id=row.id,
        namespace=row.namespace,
        external_id=row.external_id,
        content=row.content,
        content_hash=row.content_hash,
        type=row.type,
        tags=tuple(row.tags or ()),
        importance=row.importance,
        base_importance=row.base_importance,
        access_count=row.access_count,
        last_accessed=row.last_accessed,
        event_time=row.event_time,
        created_at=row.created_at,
        updated_at=row.updated_at,
        session_id=row.session_id,
        prev_id=row.prev_id,
        next_id=row.next_id,
        status=row.status,
        replaced_by_id=row.replaced_by_id,
        pinned=row.pinned,
        source=row.source,
        metadata=dict(row.metadata_ or {}),
        version=row.version,
    )


def record_view(row: MaintenanceRecord) -> RecordView:
    return RecordView(
        id=row.id,
        job=row.job,
        namespace=row.namespace,
        status=row.status,
        started_at=row.started_at,
        finished_at=row.finished_at,
        model=row.model,
        prompts=tuple(row.prompts or ()),
        tokens_in=row.tokens_in,
        tokens_out=row.tokens_out,
        cost=row.cost,
        stats=dict(row.stats or {}),
        error=row.error,
        undoes_id=row.undoes_id,
        undone_by_id=row.undone_by_id,
    )


def operation_view(row: MaintenanceOperation) -> OperationView:
    return OperationView(
        seq=row.seq,
        op=row.op,
        target_kind=row.target_kind,
        target_id=row.target_id,
        before=row.before,
        after=row.after,
    )
