"""What the daemon reads besides memories and records: logs, job state, the index outbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select

from store.db import session_factory
from store.models import ConversationLog, IndexOutbox, JobState, Memory
from store.reads.memories import past_marks
from store.views import JobStateView, LogView


@dataclass(frozen=True, kw_only=True)
class OutboxEntry:
    id: int
    namespace: str
    memory_id: int


class WorkReads:
    """The daemon's other reads over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = session_factory(engine)

    def logs_after(self, namespace: str, after_id: int, *, limit: int) -> list[LogView]:
        """Return the first ``limit`` conversation log lines with id above ``after_id``."""
        query = (
            select(ConversationLog)
            .where(ConversationLog.namespace == namespace, ConversationLog.id > after_id)
            .order_by(ConversationLog.id)
            .limit(limit)
        )
        with self._session() as session:
            return [_log_view(row) for row in session.scalars(query)]

    def logs_count_after(self, marks: Mapping[str, int]) -> dict[str, int]:
        """Return, for each namespace in ``marks`` (namespace -> log id), how many conversation
        log lines it holds with an id above its mark; the extractor's backlog."""
        log = ConversationLog
        found: dict[str, int] = {}
        with self._session() as session:
            for past in past_marks(log.namespace, log.id, marks):
                query = select(log.namespace, func.count()).where(past).group_by(log.namespace)
                found.update({ns: int(n) for ns, n in session.execute(query)})
        return {namespace: found.get(namespace, 0) for namespace in marks}

    def logs(self, namespace: str, ids: Sequence[int]) -> list[LogView]:
        """Return the conversation log lines of the namespace with these ids, by id."""
        query = (
            select(ConversationLog)
            .where(ConversationLog.namespace == namespace, ConversationLog.id.in_(list(ids)))
            .order_by(ConversationLog.id)
        )
        with self._session() as session:
            return [_log_view(row) for row in session.scalars(query)]

    def job_state(self, job: str, namespace: str) -> dict[str, Any]:
        """Return the job's saved state (watermarks) in the namespace; {} if it never saved."""
        with self._session() as session:
            row = session.get(JobState, (job, namespace))
            return dict(row.state) if row is not None else {}

    def job_health(self, job: str, namespace: str) -> dict[str, Any]:
        """Return how the job's runs in the namespace went ({} if it never ran)."""
        with self._session() as session:
            row = session.get(JobState, (job, namespace))
            return dict(row.health or {}) if row is not None else {}

    def job_states(self, namespace: str | None = None) -> list[JobStateView]:
        """Return every job's state and health, by namespace then job."""
        query = select(JobState).order_by(JobState.namespace, JobState.job)
        if namespace is not None:
            query = query.where(JobState.namespace == namespace)
        with self._session() as session:
            return [
                JobStateView(
                    job=row.job,
                    namespace=row.namespace,
                    state=dict(row.state or {}),
                    health=dict(row.health or {}),
                    updated_at=row.updated_at,
                )
                for row in session.scalars(query)
            ]

    def namespaces_with_work(self) -> list[str]:
        """Return the namespaces that hold memories or conversation logs, sorted."""
        with self._session() as session:
            memories = set(session.scalars(select(Memory.namespace).distinct()))
            logs = set(session.scalars(select(ConversationLog.namespace).distinct()))
        return sorted(memories | logs)

    def namespaces_waiting_longest(self, job: str) -> list[str]:
        """Return the namespaces with work, those ``job`` never served first, then the one it
        served longest ago (its state's last change): a night cut short leaves the longest
        waiting served."""
        names = self.namespaces_with_work()
        with self._session() as session:
            served = {
                row.namespace: row.updated_at
                for row in session.execute(
                    select(JobState.namespace, JobState.updated_at).where(JobState.job == job)
                )
            }
        return sorted(names, key=lambda name: (name in served, served.get(name) or 0, name))

    def outbox(
        self, *, limit: int, namespace: str | None = None, excluding: Sequence[str] = ()
    ) -> list[OutboxEntry]:
        """Return the oldest pending outbox entries (of ``namespace``, or of any but those
        ``excluding`` names)."""
        query = select(IndexOutbox).order_by(IndexOutbox.id).limit(limit)
        if namespace is not None:
            query = query.where(IndexOutbox.namespace == namespace)
        if excluding:
            query = query.where(IndexOutbox.namespace.not_in(list(excluding)))
        with self._session() as session:
            return [
                OutboxEntry(id=row.id, namespace=row.namespace, memory_id=row.memory_id)
                for row in session.scalars(query)
            ]

    def outbox_waiting(self, namespace: str) -> bool:
        """Return whether the namespace has outbox entries not applied yet (one index probe,
        however many other namespaces' entries wait)."""
        query = select(IndexOutbox.id).where(IndexOutbox.namespace == namespace).limit(1)
        with self._session() as session:
            return session.scalar(query) is not None

    def outbox_size(self) -> int:
        with self._session() as session:
            return int(session.scalar(select(func.count()).select_from(IndexOutbox)) or 0)


def _log_view(row: ConversationLog) -> LogView:
    return LogView(
        id=row.id,
        session_id=row.session_id,
        role=row.role,
        content=row.content,
        timestamp=row.timestamp,
    )
