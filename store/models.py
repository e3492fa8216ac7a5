"""SQLAlchemy models: SQL is the truth; Chroma and the lexical index are derived from these rows.

Every write goes through the one writer (``store.write.unit``), which also writes the maintenance
record and the index outbox in the same transaction. The enums live in ``store.kinds``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from store.kinds import MemoryStatus, MemoryType

# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets 64-bit ids.
Id = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them naive, as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Ids that callers cache and records name are never handed out again, even after the row is
# gone (undone, purged, forgotten): SQLite reuses the highest rowid without AUTOINCREMENT.
# PostgreSQL's sequences never go back anyway. Records are never deleted once committed.
NEVER_REUSED = {"sqlite_autoincrement": True}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Memory(Base):
    __tablename__ = "memories"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(128))
    external_id: Mapped[str | None] = mapped_column(String(256))
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32), default=MemoryType.EVENT.value)
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    importance: Mapped[int] = mapped_column(Integer, default=5)
    base_importance: Mapped[float] = mapped_column(Float, default=5.0)
    access_count: Mapped[int] = mapped_column(Integer, default=0)
    last_accessed: Mapped[datetime | None] = mapped_column(UTCDateTime)
    event_time: Mapped[datetime] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    session_id: Mapped[str | None] = mapped_column(String(256))
    prev_id: Mapped[int | None] = mapped_column(Id, ForeignKey("memories.id", ondelete="SET NULL"))
    next_id: Mapped[int | None] = mapped_column(Id, ForeignKey("memories.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), default=MemoryStatus.ACTIVE.value)
    # The memory that replaced this one (set when it is superseded or merged).
    replaced_by_id: Mapped[int | None] = mapped_column(
        Id, ForeignKey("memories.id", ondelete="SET NULL")
    )
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    source: Mapped[str] = mapped_column(String(64), default="api")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    version: Mapped[int] = mapped_column(Integer, default=1)

    __table_args__ = (
        UniqueConstraint("namespace", "external_id", name="uq_memories_namespace_external_id"),
        Index("ix_memories_timeline", "namespace", "event_time", "id"),
        Index("ix_memories_hash", "namespace", "content_hash"),
        Index("ix_memories_status", "namespace", "status"),
        Index("ix_memories_session", "namespace", "session_id"),
        # Search reads the memories a memory replaced (store.reads.search: SearchReads.search_rows).
        Index("ix_memories_replaced_by", "replaced_by_id"),
        # The lexical index is compared with every memory's id, version and status after
        # writes it did not see (store.reads.search: SearchReads.memory_versions): read from
        # this index alone, 0.5 s at 1M memories instead of 3-15 s of reading the rows.
        Index("ix_memories_versions", "namespace", "id", "version", "status"),
        NEVER_REUSED,
    )


class MemoryRelation(Base):
    __tablename__ = "memory_relations"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(128))
    source_id: Mapped[int] = mapped_column(Id, ForeignKey("memories.id", ondelete="CASCADE"))
    target_id: Mapped[int] = mapped_column(Id, ForeignKey("memories.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(32))
    strength: Mapped[float] = mapped_column(Float, default=0.5)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("source_id", "target_id", "type", name="uq_relations_edge"),
        Index("ix_relations_source", "source_id"),
        Index("ix_relations_target", "target_id"),
        NEVER_REUSED,
    )


class ConversationLog(Base):
    __tablename__ = "conversation_logs"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(256))
    role: Mapped[str] = mapped_column(String(32))
    content: Mapped[str] = mapped_column(Text)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime)
    pair_id: Mapped[str | None] = mapped_column(String(256))
    idempotency_key: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("namespace", "idempotency_key", name="uq_logs_namespace_key"),
        Index("ix_logs_session", "namespace", "session_id", "timestamp"),
        NEVER_REUSED,
    )


class MaintenanceRecord(Base):
    """One job run (or ingest batch, or undo): what it did, with what, and how it ended."""

    __tablename__ = "maintenance_records"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    model: Mapped[str | None] = mapped_column(String(256))
    prompts: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float | None] = mapped_column(Float)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    # Undo links: an undo record points at what it undid, and the undone record back at it.
    undoes_id: Mapped[int | None] = mapped_column(Id, ForeignKey("maintenance_records.id"))
    undone_by_id: Mapped[int | None] = mapped_column(Id, ForeignKey("maintenance_records.id"))

    __table_args__ = (Index("ix_records_namespace", "namespace", "started_at"),)


class MaintenanceOperation(Base):
    """One step of a record, with full before/after images so that undo needs nothing else."""

    __tablename__ = "maintenance_operations"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    record_id: Mapped[int] = mapped_column(
        Id, ForeignKey("maintenance_records.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    op: Mapped[str] = mapped_column(String(32))
    target_kind: Mapped[str] = mapped_column(String(16))  # "memory" | "relation"
    target_id: Mapped[int] = mapped_column(Id)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    __table_args__ = (
        UniqueConstraint("record_id", "seq", name="uq_operations_record_seq"),
        Index("ix_operations_target", "target_kind", "target_id"),
    )


class IndexOutbox(Base):
    """A change the vector index has not applied yet; deleted once Chroma has it."""

    __tablename__ = "index_outbox"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(128))
    memory_id: Mapped[int] = mapped_column(Id)
    action: Mapped[str] = mapped_column(String(8))  # "upsert" | "delete"
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    # A job's run applies its own namespace's entries, oldest first (``Indexer.sync``).
    __table_args__ = (Index("ix_outbox_namespace", "namespace", "id"),)


class StoreIdentity(Base):
    """The store's id (one row, made by migration 0012): its Chroma collections carry it, so
    that two stores never write into one collection (``store.vector.index``)."""

    __tablename__ = "store_identity"

    name: Mapped[str] = mapped_column(String(16), primary_key=True)  # "store"
    store_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IndexRebuild(Base):
    """A vector index rebuild of one namespace that has not finished
    (``store.coordination.rebuilds``).

    Written before the rebuild touches Chroma and deleted only once the new collection has
    replaced the old one, so a rebuild cut short is never mistaken for a complete index.
    """

    __tablename__ = "index_rebuilds"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    phase: Mapped[str] = mapped_column(String(16))  # "copying" -> "promoting"
    # Every active memory with an id up to this one is in the new collection.
    after_id: Mapped[int] = mapped_column(BigInteger)
    copied: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[int] = mapped_column(BigInteger)  # active memories when asked for (progress)
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class NamespaceState(Base):
    """Per-namespace revision counters; its row lock also serialises timeline inserts."""

    __tablename__ = "namespace_state"

    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger, default=0)  # grows with every change
    # Grows with a change an index that follows new ids would miss (``store.write.unit._rewrites``):
    # a memory's text or filter field changed, its row went (undo, purge, forget), came back
    # under its old id or became active again. Such an index then compares itself with SQL.
    rewritten: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class JobState(Base):
    """Per job and namespace: the plan's state (watermarks) and the runs' health."""

    __tablename__ = "job_state"

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128), primary_key=True)
    # What plans start from and save with their changes (watermarks); approval compares it.
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # How the runs went: the last outcome, failures in a row, back-off, quarantined items.
    health: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DaemonLease(Base):
    """A named lease: which daemon acts on this store ("daemon"), which process runs a job on a
    namespace ("run:JOB:NAMESPACE"); taken over only once it has expired or its holder died."""

    __tablename__ = "daemon_leases"

    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))  # host:pid:uuid
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ScheduleEntry(Base):
    """A job's schedule as changed with `secretary schedule`; it overrides the config file."""

    __tablename__ = "schedule_entries"

    job: Mapped[str] = mapped_column(String(64), primary_key=True)
    # None: the config file's expression applies.
    cron: Mapped[str | None] = mapped_column(String(128))
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    # When the daemon last started this job, so that a restart can catch up a missed run, and
    # when that run finished: a start after the last finish is a firing cut short (a crash).
    last_fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The running daemon's next fire time for the job (None: not scheduled, or no daemon), so
    # that every process can show it.
    next_fire_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DreamRequest(Base):
    """A request to dream now (`secretary dream`, POST /v1/dream) for the daemon to pick up."""

    __tablename__ = "dream_requests"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    # None: every namespace with work; the jobs in their order unless ``jobs`` names some.
    namespace: Mapped[str | None] = mapped_column(String(128))
    jobs: Mapped[list[str]] = mapped_column(JSON, default=list)
    retry_quarantined: Mapped[bool] = mapped_column(Boolean, default=False)
    requested_by: Mapped[str] = mapped_column(String(256))
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # "pending" -> "running" (picked up by ``picked_by``) -> "done" or "failed"
    status: Mapped[str] = mapped_column(String(16), default="pending")
    picked_by: Mapped[str | None] = mapped_column(String(256))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcomes: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_dream_requests_status", "status", "id"),)


class ConsoleSession(Base):
    """A console login (``store.coordination.console_sessions``): the browser's cookie is valid
    while its row exists and has not expired; logging out deletes it."""

    __tablename__ = "console_sessions"

    # The SHA-256 of the cookie's random token: a copy of the table opens no session.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The key it logged in with, by its fingerprint (a hash; never the key).
    key_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class Firing(Base):
    """A night's work shared by the daemons (``store.coordination.firings``): a scheduled job's
    firing, or a dream request, cut into one unit per namespace. ``key`` makes a firing happen
    once per time however many daemons fire it ("consolidator@2026-11-28T02:00:00+00:00",
    "dream:42")."""

    __tablename__ = "firings"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(256), unique=True)
    # The jobs each unit runs on its namespace, in this order.
    jobs: Mapped[list[str]] = mapped_column(JSON, default=list)
    manual: Mapped[bool] = mapped_column(Boolean, default=False)  # asked for: overrides back-off
    retry_quarantined: Mapped[bool] = mapped_column(Boolean, default=False)
    opened_by: Mapped[str] = mapped_column(String(256))
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_firings_open", "finished_at", "id"),)


class FiringUnit(Base):
    """One namespace's share of a firing: "pending" -> "running" (under a lease that its daemon
    renews; an expired one is taken over) -> "done", with what its runs said."""

    __tablename__ = "firing_units"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    firing_id: Mapped[int] = mapped_column(ForeignKey("firings.id", ondelete="CASCADE"))
    namespace: Mapped[str] = mapped_column(String(128))
    position: Mapped[int] = mapped_column(Integer)  # the order units are taken in
    state: Mapped[str] = mapped_column(String(16), default="pending")
    holder: Mapped[str | None] = mapped_column(String(256))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claims: Mapped[int] = mapped_column(Integer, default=0)  # more than 1: taken over
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcomes: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)

    __table_args__ = (
        UniqueConstraint("firing_id", "namespace"),
        Index("ix_firing_units_claim", "state", "firing_id", "position"),
        Index("ix_firing_units_namespace", "namespace", "state"),
    )


class RateLimit(Base):
    """A limit shared by every process of the store (``store.coordination.rate_limits``): its
    row is the lock that orders reservations, and holds the pause a provider's 429 asked for."""

    __tablename__ = "rate_limits"

    scope: Mapped[str] = mapped_column(String(128), primary_key=True)  # e.g. "llm"
    paused_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RateEvent(Base):
    """One request counted against a scope's limits: when, and the tokens it reserved (then
    used); rows older than the window are deleted as new ones come."""

    __tablename__ = "rate_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    holder: Mapped[str] = mapped_column(String(256))

    __table_args__ = (Index("ix_rate_events_scope_at", "scope", "at"),)
