"""Reading maintenance records: lists, one with its operations, histories, plans, tokens, and
the counts the operator's views need (changes by kind, a day's usage)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Engine, func, select

from store.changes import change_kind, ordered
from store.db import chunks, session_factory
from store.errors import NotFound
from store.kinds import RecordStatus
from store.models import MaintenanceOperation, MaintenanceRecord
from store.reads.rows import operation_view, record_view
from store.views import OperationView, RecordView


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What a namespace's records of one day spent on the LLM."""

    tokens: int
    cost: float  # 0.0 when no record knew its cost


class RecordReads:
    """Maintenance records of the store over one engine, as frozen views."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def find(
        self,
        *,
        namespaces: Sequence[str] | None = None,
        job: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[RecordView]:
        """Return records, newest first; ``namespaces=None`` means every namespace."""
        query = select(MaintenanceRecord).order_by(MaintenanceRecord.id.desc()).limit(limit)
        if namespaces is not None:
            query = query.where(MaintenanceRecord.namespace.in_(list(namespaces)))
        if job is not None:
            query = query.where(MaintenanceRecord.job == job)
        if status is not None:
            query = query.where(MaintenanceRecord.status == status)
        with self._session() as session:
            return [record_view(row) for row in session.scalars(query)]

    def jobs(self, *, namespaces: Sequence[str] | None = None) -> list[str]:
        """Return the jobs that have records (in ``namespaces``; None: in any), by name."""
        query = select(MaintenanceRecord.job).distinct().order_by(MaintenanceRecord.job)
        if namespaces is not None:
            query = query.where(MaintenanceRecord.namespace.in_(list(namespaces)))
        with self._session() as session:
            return list(session.scalars(query))

    def get(
        self, record_id: int, *, namespaces: Sequence[str] | None = None
    ) -> tuple[RecordView, list[OperationView]]:
        """Return a record and its operations in order.

        Raise NotFound if it is missing or in another namespace than ``namespaces`` (so that
        both look the same).
        """
        with self._session() as session:
            row = session.get(MaintenanceRecord, record_id)
            if row is None or (namespaces is not None and row.namespace not in namespaces):
                raise NotFound("record", record_id)
            operations = session.scalars(
                select(MaintenanceOperation)
                .where(MaintenanceOperation.record_id == record_id)
                .order_by(MaintenanceOperation.seq)
            )
            return record_view(row), [operation_view(op) for op in operations]

    def history(self, namespace: str, memory_id: int) -> list[RecordView]:
        """Return the records whose operations touched the memory, oldest first."""
        touching = select(MaintenanceOperation.record_id).where(
            MaintenanceOperation.target_kind == "memory",
            MaintenanceOperation.target_id == memory_id,
        )
        query = (
            select(MaintenanceRecord)
            .where(MaintenanceRecord.namespace == namespace, MaintenanceRecord.id.in_(touching))
            .order_by(MaintenanceRecord.id)
        )
        with self._session() as session:
            return [record_view(row) for row in session.scalars(query)]

    def pending(self, job: str, namespace: str) -> int | None:
        """Return the id of the job's plan awaiting approval in the namespace, if there is one."""
        query = (
            select(MaintenanceRecord.id)
            .where(
                MaintenanceRecord.job == job,
                MaintenanceRecord.namespace == namespace,
                MaintenanceRecord.status == RecordStatus.PLANNED.value,
            )
            .order_by(MaintenanceRecord.id)
            .limit(1)
        )
        with self._session() as session:
            return session.scalars(query).first()

    def planned(self, namespace: str | None = None) -> list[RecordView]:
        """Return the records of plans awaiting approval, oldest first."""
        query = select(MaintenanceRecord).where(
            MaintenanceRecord.status == RecordStatus.PLANNED.value
        )
        if namespace is not None:
            query = query.where(MaintenanceRecord.namespace == namespace)
        with self._session() as session:
            return [record_view(r) for r in session.scalars(query.order_by(MaintenanceRecord.id))]

    def tokens_on(self, namespace: str, day: date) -> int:
        """Return the LLM tokens the namespace's records started on a UTC day hold."""
        start = datetime.combine(day, time(), tzinfo=UTC)
        query = select(
            func.coalesce(func.sum(MaintenanceRecord.tokens_in + MaintenanceRecord.tokens_out), 0)
        ).where(
            MaintenanceRecord.namespace == namespace,
            MaintenanceRecord.started_at >= start,
            MaintenanceRecord.started_at < start + timedelta(days=1),
        )
        with self._session() as session:
            return int(session.scalar(query) or 0)

    def usage_on(self, day: date, namespaces: Sequence[str] | None = None) -> dict[str, Usage]:
        """Return, by namespace, the tokens and cost of the records started on a UTC day
        (namespaces whose records spent nothing are left out)."""
        start = datetime.combine(day, time(), tzinfo=UTC)
        record = MaintenanceRecord
        query = (
            select(
                record.namespace,
                func.coalesce(func.sum(record.tokens_in + record.tokens_out), 0),
                func.coalesce(func.sum(record.cost), 0.0),
            )
            .where(record.started_at >= start, record.started_at < start + timedelta(days=1))
            .group_by(record.namespace)
        )
        if namespaces is not None:
            query = query.where(record.namespace.in_(list(namespaces)))
        with self._session() as session:
            return {
                namespace: Usage(tokens=int(tokens), cost=float(cost or 0.0))
                for namespace, tokens, cost in session.execute(query)
                if tokens or cost
            }

    def change_counts(self, record_ids: Iterable[int]) -> dict[int, dict[str, int]]:
        """Return each record's changes by kind (``store.changes``); records without
        operations are left out. One grouped read per chunk of ids."""
        op = MaintenanceOperation
        columns = (
            op.record_id,
            op.op,
            op.before["status"].as_string(),
            op.after["status"].as_string(),
            op.before["version"].as_integer(),
            op.after["version"].as_integer(),
        )
        found: dict[int, dict[str, int]] = {}
        with self._session() as session:
            for chunk in chunks(record_ids):
                query = select(*columns, func.count()).where(op.record_id.in_(chunk))
                for record_id, name, s0, s1, v0, v1, n in session.execute(query.group_by(*columns)):
                    kind = change_kind(
                        name, status_before=s0, status_after=s1, version_before=v0, version_after=v1
                    )
                    counts = found.setdefault(record_id, {})
                    counts[kind] = counts.get(kind, 0) + int(n)
        return {record_id: ordered(counts) for record_id, counts in found.items()}

    def after(self, record_id: int, *, limit: int) -> list[RecordView]:
        """Return the first ``limit`` records with an id above ``record_id``, by id."""
        query = (
            select(MaintenanceRecord)
            .where(MaintenanceRecord.id > record_id)
            .order_by(MaintenanceRecord.id)
            .limit(limit)
        )
        with self._session() as session:
            return [record_view(row) for row in session.scalars(query)]

    def many(self, record_ids: Iterable[int]) -> list[RecordView]:
        """Return the records among ``record_ids`` that exist, by id."""
        found: list[RecordView] = []
        with self._session() as session:
            for chunk in chunks(record_ids):
                query = select(MaintenanceRecord).where(MaintenanceRecord.id.in_(chunk))
                found.extend(record_view(row) for row in session.scalars(query))
        return sorted(found, key=lambda record: record.id)
