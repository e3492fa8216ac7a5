"""Reading maintenance records: finding them, one with its operations, and their JSON views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from store.errors import NotFound
from store.models import MaintenanceOperation, MaintenanceRecord
from store.repository import Repository


def find_records(
    repository: Repository,
    *,
    namespaces: Sequence[str] | None = None,
    job: str | None = None,
    status: str | None = None,
    limit: int = 50,
) -> list[MaintenanceRecord]:
    """Return records, newest first; ``namespaces=None`` means every namespace."""
    query = select(MaintenanceRecord).order_by(MaintenanceRecord.id.desc()).limit(limit)
    if namespaces is not None:
        query = query.where(MaintenanceRecord.namespace.in_(list(namespaces)))
    if job is not None:
        query = query.where(MaintenanceRecord.job == job)
    if status is not None:
        query = query.where(MaintenanceRecord.status == status)
    with repository.reading() as session:
        return list(session.scalars(query))


def get_record(
    repository: Repository, record_id: int, *, namespaces: Sequence[str] | None = None
) -> tuple[MaintenanceRecord, list[MaintenanceOperation]]:
    """Return a record and its operations in order. Raise NotFound if it is missing or in
    another namespace than ``namespaces`` (so that both look the same).
    """
    record, operations = repository.record(record_id)
    if namespaces is not None and record.namespace not in namespaces:
        raise NotFound("record", record_id)
    return record, operations


def record_json(record: MaintenanceRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "job": record.job,
        "namespace": record.namespace,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "undoes_id": record.undoes_id,
        "undone_by_id": record.undone_by_id,
    }


def record_detail_json(
    record: MaintenanceRecord, operations: Sequence[MaintenanceOperation]
) -> dict[str, Any]:
    return {
        **record_json(record),
        "model": record.model,
        "prompts": list(record.prompts or []),
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cost": record.cost,
        "stats": dict(record.stats or {}),
        "error": record.error,
        "operations": [
            {
                "seq": op.seq,
                "op": op.op,
                "target_kind": op.target_kind,
                "target_id": op.target_id,
                "before": op.before,
                "after": op.after,
            }
            for op in sorted(operations, key=lambda o: o.seq)
        ],
    }
