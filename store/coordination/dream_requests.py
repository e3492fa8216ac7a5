"""Requests to dream now (`secretary dream`, POST /v1/dream), queued for whoever runs the jobs.

A request goes ``pending`` -> ``running`` (claimed by ``picked_by``) -> ``done`` or ``failed``;
while it runs, the outcomes of the runs done so far are stored as they come (``progress``).
Claiming is one conditional UPDATE that compares the status and the picker it read: on SQLite
(a write transaction) and PostgreSQL (the row lock re-checks the condition) alike, two
claimers never both take one request. A request whose picker holds no live lease any more (its
daemon died, or stopped before finishing) is claimed again by the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Update, and_, insert, or_, select, update
from sqlalchemy.orm import Session

from store.db import session_factory, transaction
from store.models import DaemonLease, DreamRequest

PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
FINISHED = (DONE, FAILED)
CANDIDATES = 8  # rows looked at per claim; all but a lost race take the first


@dataclass(frozen=True, kw_only=True)
class DreamRequestView:
    """One request. ``namespace`` None: every namespace with work; ``jobs`` empty: every job."""

    id: int
    namespace: str | None
    jobs: tuple[str, ...]
    retry_quarantined: bool
    requested_by: str
    requested_at: datetime
    status: str
    picked_by: str | None
    started_at: datetime | None
    finished_at: datetime | None
    # One mapping per job run: job, namespace, status, record_id, message.
    outcomes: tuple[Mapping[str, Any], ...]
    error: str | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def _view(row: DreamRequest) -> DreamRequestView:
    return DreamRequestView(
        id=row.id,
        namespace=row.namespace,
        jobs=tuple(row.jobs or ()),
        retry_quarantined=row.retry_quarantined,
        requested_by=row.requested_by,
        requested_at=row.requested_at,
        status=row.status,
        picked_by=row.picked_by,
        started_at=row.started_at,
        finished_at=row.finished_at,
        outcomes=tuple(dict(outcome) for outcome in row.outcomes or ()),
        error=row.error,
    )


class DreamRequests:
    """Reads and writes ``dream_requests``; callers validate namespaces and job names."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._reads = session_factory(engine)
        self._writes = session_factory(engine, write=True)

    def enqueue(
        self,
        *,
        namespace: str | None,
        jobs: Sequence[str],
        retry_quarantined: bool,
        requested_by: str,
        now: datetime,
    ) -> int:
        """Queue a request; return its id."""
        statement = insert(DreamRequest).values(
            namespace=namespace,
            jobs=list(jobs),
            retry_quarantined=retry_quarantined,
            requested_by=requested_by,
            requested_at=now,
            status=PENDING,
            outcomes=[],
        )
        with transaction(self._writes) as session:
            return int(session.execute(statement.returning(DreamRequest.id)).scalar_one())

    def get(self, request_id: int) -> DreamRequestView | None:
        with self._reads() as session:
            row = session.get(DreamRequest, request_id)
            return None if row is None else _view(row)

    def recent(self, limit: int = 20) -> list[DreamRequestView]:
        """Return the newest requests first."""
        with self._reads() as session:
            rows = session.scalars(
                select(DreamRequest).order_by(DreamRequest.id.desc()).limit(limit)
            ).all()
            return [_view(row) for row in rows]

    def claim(self, *, picker: str, now: datetime) -> DreamRequestView | None:
        """Take the oldest request that is pending or whose picker is gone; None if none is.

        ``picker`` must hold a lease (the daemon's, say) for as long as it runs the request: a
        running request whose picker holds no live lease is free to be claimed again. A picker
        claims only when it runs no request, so one still running under its own name was cut
        short (its outcomes could not be stored): it is taken again too.
        """
        for _ in range(3):  # every candidate lost to another claimer: look again
            with self._reads() as session:
                candidates = session.execute(
                    select(DreamRequest.id, DreamRequest.status, DreamRequest.picked_by)
                    .where(_claimable(picker, now))
                    .order_by(DreamRequest.id)
                    .limit(CANDIDATES)
                ).all()
            if not candidates:
                return None
            for request_id, status, picked_by in candidates:
                claimed = self._take(request_id, status, picked_by, picker=picker, now=now)
                if claimed is not None:
                    return claimed
        return None

    def finish(
        self,
        request_id: int,
        *,
        picker: str,
        outcomes: Sequence[Mapping[str, Any]],
        now: datetime,
        error: str | None = None,
    ) -> bool:
        """Mark a request done (failed if ``error``); False if ``picker`` no longer has it."""
        statement = _held(request_id, picker).values(
            status=FAILED if error is not None else DONE,
            finished_at=now,
            outcomes=[dict(outcome) for outcome in outcomes],
            error=error,
        )
        with transaction(self._writes) as session:
            return _changed(session, statement)

    def progress(
        self, request_id: int, *, picker: str, outcomes: Sequence[Mapping[str, Any]]
    ) -> bool:
        """Store the outcomes of a running request's runs so far (``secretary dream`` and the
        console show them as they come); False if ``picker`` no longer has it."""
        statement = _held(request_id, picker).values(
            outcomes=[dict(outcome) for outcome in outcomes]
        )
        with transaction(self._writes) as session:
            return _changed(session, statement)

    def cancel(self, request_id: int, *, reason: str, now: datetime) -> bool:
        """Fail a request nobody has started yet; False if it was claimed (or finished)."""
        statement = (
            update(DreamRequest)
            .where(DreamRequest.id == request_id, DreamRequest.status == PENDING)
            .values(status=FAILED, finished_at=now, error=reason)
        )
        with transaction(self._writes) as session:
            return _changed(session, statement)

    def picker_alive(self, picker: str, *, now: datetime) -> bool:
        """True while ``picker`` holds a lease that has not expired."""
        with self._reads() as session:
            found = session.execute(
                select(DaemonLease.name)
                .where(DaemonLease.holder == picker, DaemonLease.expires_at > now)
                .limit(1)
            ).first()
        return found is not None

    def _take(
        self, request_id: int, status: str, picked_by: str | None, *, picker: str, now: datetime
    ) -> DreamRequestView | None:
        # Compare-and-set on what was read: a claimer that lost the race matches no row.
        same_picker = (
            DreamRequest.picked_by.is_(None)
            if picked_by is None
            else DreamRequest.picked_by == picked_by
        )
        statement = (
            update(DreamRequest)
            .where(DreamRequest.id == request_id, DreamRequest.status == status, same_picker)
            .values(status=RUNNING, picked_by=picker, started_at=now)
        )
        with transaction(self._writes) as session:
            if not _changed(session, statement):
                return None
            row = session.get(DreamRequest, request_id)
            assert row is not None  # updated in this very transaction
            return _view(row)


def _claimable(picker: str, now: datetime) -> Any:
    live_holders = select(DaemonLease.holder).where(DaemonLease.expires_at > now)
    return or_(
        DreamRequest.status == PENDING,
        and_(
            DreamRequest.status == RUNNING,
            or_(
                DreamRequest.picked_by.is_(None),
                DreamRequest.picked_by == picker,
                DreamRequest.picked_by.not_in(live_holders),
            ),
        ),
    )


def _changed(session: Session, statement: Any) -> bool:
    return bool(session.execute(statement).rowcount == 1)  # type: ignore[attr-defined]


def _held(request_id: int, picker: str) -> Update:
    """An update of the request while ``picker`` runs it (none once it lost or ended it)."""
    return update(DreamRequest).where(
        DreamRequest.id == request_id,
        DreamRequest.status == RUNNING,
        DreamRequest.picked_by == picker,
    )
