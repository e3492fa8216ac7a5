"""The repository: every write to the store goes through here, with its record, in one go."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, TypeVar

from sqlalchemy import Engine, and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store import reads
from store.changeset import ChangeSet
from store.db import session_factory, transaction
from store.errors import NotFound, ValidationFailed
from store.images import memory_image, memory_values, relation_image, relation_values
from store.models import (
    ConversationLog,
    IndexOutbox,
    JobState,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    MemoryStatus,
    RecordStatus,
)
from store.reads import CHUNK, Edge, LexicalRow, SearchRow
from store.schemas import LogIn, MemoryIn
from store.text import content_hash

LLM_USAGE = "llm_usage"  # the job_state row that counts LLM tokens per namespace and day


@dataclass(frozen=True, kw_only=True)
class AddResult:
    """What an add call did: one id per input item, in input order, and which were new."""

    ids: tuple[int, ...]
    created: tuple[int, ...]
    record_id: int | None

    @property
    def skipped(self) -> int:
        return len(self.ids) - len(self.created)


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _timeline_key(memory: Memory) -> tuple[datetime, int]:
    return (memory.event_time, memory.id)


class Repository:
    """Reads and writes of the memory store. Given an engine at the newest schema."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._read = session_factory(engine)
        self._write = session_factory(engine, write=True)

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Session]:
        with self._read() as session:
            yield session

    @contextmanager
    def changing(
        self,
        namespace: str,
        job: str,
        now: datetime,
        *,
        stats: Mapping[str, Any] | None = None,
        restoring: bool = False,
        keep_empty: bool = False,
    ) -> Iterator[tuple[Session, ChangeSet]]:
        """Open a write transaction with its maintenance record; commit both or neither.

        A transaction that ends up changing nothing leaves no record behind, unless
        ``keep_empty`` (a run that spent tokens says so). ``restoring`` (undo) writes images
        back as they were: no version bump.
        """
        with transaction(self._write) as session:
            record = MaintenanceRecord(
                job=job,
                namespace=namespace,
                status=RecordStatus.APPLIED.value,
                started_at=now,
                finished_at=now,
                stats=dict(stats or {}),
                prompts=[],
            )
            session.add(record)
            session.flush()
            changes = ChangeSet(session=session, record=record, now=now, restoring=restoring)
            # Serialises writers of one namespace (a row lock on PostgreSQL).
            changes.lock_namespace()
            yield session, changes
            if not changes.finish() and not keep_empty:
                session.delete(record)
                changes.empty = True

    # -- memories ------------------------------------------------------------------------------

    def add_memories(
        self,
        namespace: str,
        items: Sequence[MemoryIn],
        *,
        now: datetime,
        job: str = "ingest",
        source: str = "api",
    ) -> AddResult:
        """Insert the memories that are not there yet, linked into the namespace's timeline.

        An item is already there when its ``external_id`` exists in the namespace or, without
        one, when a memory with the same content, session and (if given) timestamp exists.
        """
        with self.changing(namespace, job, now, stats={"items": len(items)}) as (session, changes):
            existing = self._find_existing(session, namespace, items)
            ids: list[int] = []
            created: list[int] = []
            seen: dict[object, int] = {}
            for item in items:
                key = _identity(item)
                found = existing.get(key, seen.get(key))
                if found is not None:
                    ids.append(found)
                    continue
                memory = _new_memory(namespace, item, now=now, source=source)
                session.add(memory)
                session.flush()
                changes.created(memory)
                self.link_into_timeline(session, changes, memory)
                ids.append(memory.id)
                created.append(memory.id)
                seen[key] = memory.id
            record_id = changes.record.id if created else None
            changes.record.stats["created"] = len(created)
        return AddResult(ids=tuple(ids), created=tuple(created), record_id=record_id)

    def _find_existing(
        self, session: Session, namespace: str, items: Sequence[MemoryIn]
    ) -> dict[object, int]:
        found: dict[object, int] = {}
        external = [item.external_id for item in items if item.external_id]
        for chunk in _chunks(external):
            rows = session.execute(
                select(Memory.external_id, Memory.id).where(
                    Memory.namespace == namespace, Memory.external_id.in_(chunk)
                )
            )
            found.update({("ext", ext): mid for ext, mid in rows})
        hashes = sorted({content_hash(item.content) for item in items if not item.external_id})
        for chunk in _chunks(hashes):
            matches = session.execute(
                select(Memory.content_hash, Memory.session_id, Memory.event_time, Memory.id).where(
                    Memory.namespace == namespace,
                    Memory.content_hash.in_(chunk),
                    Memory.external_id.is_(None),
                )
            )
            for digest, session_id, event_time, mid in matches:
                found.setdefault(("hash", digest, session_id, None), mid)
                found.setdefault(("hash", digest, session_id, event_time), mid)
        return found

    @staticmethod
    def link_into_timeline(
        session: Session, changes: ChangeSet, memory: Memory, *, skip: Iterable[int] = ()
    ) -> None:
        """Place a flushed memory between its neighbours by (event_time, id).

        Merged memories are off the timeline (their summary took their place), as are ``skip``.
        """
        ns, at, mid = memory.namespace, memory.event_time, memory.id
        others = and_(
            Memory.namespace == ns,
            Memory.id.not_in([mid, *skip]),
            Memory.status != MemoryStatus.MERGED.value,
        )
        before_it = or_(Memory.event_time < at, and_(Memory.event_time == at, Memory.id < mid))
        pred = session.scalars(
            select(Memory)
            .where(others, before_it)
            .order_by(Memory.event_time.desc(), Memory.id.desc())
            .limit(1)
        ).first()
        if pred is not None:
            succ = session.get(Memory, pred.next_id) if pred.next_id is not None else None
        else:
            succ = session.scalars(
                select(Memory)
                .where(others, ~before_it)
                .order_by(Memory.event_time, Memory.id)
                .limit(1)
            ).first()
        memory.prev_id = pred.id if pred is not None else None
        memory.next_id = succ.id if succ is not None else None
        if pred is not None:
            changes.touch(pred)
            pred.next_id = mid
        if succ is not None:
            changes.touch(succ)
            succ.prev_id = mid

    def set_status(
        self, namespace: str, ids: Sequence[int], status: MemoryStatus, *, now: datetime, job: str
    ) -> int | None:
        """Change the status of memories (archive, supersede, ...); return the record id."""
        with self.changing(namespace, job, now) as (session, changes):
            rows = self._memories(session, namespace, ids)
            missing = set(ids) - {row.id for row in rows}
            if missing:
                raise NotFound("memory", sorted(missing)[0])
            for row in rows:
                changes.touch(row)
                row.status = status.value
            return changes.record.id

    def get_memory(self, namespace: str, memory_id: int) -> Memory | None:
        with self.reading() as session:
            return session.scalars(
                select(Memory).where(Memory.namespace == namespace, Memory.id == memory_id)
            ).first()

    def active_memories(self, namespace: str, ids: Iterable[int]) -> dict[int, Memory]:
        """Return the active memories of the namespace among ``ids``, by id."""
        rows = self.memories(namespace, ids)
        return {row.id: row for row in rows if row.status == MemoryStatus.ACTIVE}

    def memories(self, namespace: str, ids: Iterable[int]) -> list[Memory]:
        """Return the memories of the namespace among ``ids``, whatever their status."""
        with self.reading() as session:
            return self._memories(session, namespace, list(ids))

    @staticmethod
    def _memories(session: Session, namespace: str, ids: Sequence[int]) -> list[Memory]:
        rows: list[Memory] = []
        for chunk in _chunks(sorted(set(ids))):
            # By primary key alone (see store.reads), the namespace checked here.
            found = session.scalars(select(Memory).where(Memory.id.in_(chunk)))
            rows.extend(row for row in found if row.namespace == namespace)
        return rows

    def edges(self, namespace: str, ids: Iterable[int]) -> list[Edge]:
        """Return the relations touching any of ``ids`` (either end), strongest first."""
        return reads.edges(self.engine, namespace, ids)

    def add_relation(
        self,
        namespace: str,
        source_id: int,
        target_id: int,
        type_: str,
        *,
        strength: float,
        description: str = "",
        now: datetime,
        job: str,
    ) -> int:
        """Create a relation between two memories of the namespace; return its id."""
        with self.changing(namespace, job, now) as (session, changes):
            if len(self._memories(session, namespace, [source_id, target_id])) != len(
                {source_id, target_id}
            ):
                raise NotFound("memory pair", (source_id, target_id))
            relation = MemoryRelation(
                namespace=namespace,
                source_id=source_id,
                target_id=target_id,
                type=type_,
                strength=strength,
                description=description,
                created_at=now,
            )
            session.add(relation)
            session.flush()
            changes.created(relation)
            return relation.id

    # -- job state and bare records ------------------------------------------------------------

    def job_state(self, job: str, namespace: str) -> dict[str, Any]:
        with self.reading() as session:
            row = session.get(JobState, (job, namespace))
            return dict(row.state) if row is not None else {}

    @staticmethod
    def save_job_state(
        session: Session, job: str, namespace: str, state: Mapping[str, Any], *, now: datetime
    ) -> None:
        row = session.get(JobState, (job, namespace))
        if row is None:
            session.add(JobState(job=job, namespace=namespace, state=dict(state), updated_at=now))
        else:
            row.state = dict(state)
            row.updated_at = now

    def llm_tokens_used(self, namespace: str, day: date) -> int:
        """Tokens the LLM used for the namespace on a UTC day (see ``add_llm_tokens``)."""
        return int(self.job_state(LLM_USAGE, namespace).get(day.isoformat(), 0))

    def add_llm_tokens(self, namespace: str, day: date, tokens: int, *, now: datetime) -> None:
        """Count tokens spent, at once and on their own: they are spent even if the run fails."""
        with transaction(self._write) as session:
            row = session.get(JobState, (LLM_USAGE, namespace), with_for_update=True)
            days = dict(row.state) if row is not None else {}
            days[day.isoformat()] = int(days.get(day.isoformat(), 0)) + tokens
            # A week of history is plenty for a per-day budget; keep the row small.
            kept = dict(sorted(days.items())[-7:])
            self.save_job_state(session, LLM_USAGE, namespace, kept, now=now)

    @staticmethod
    def resolve_record(
        session: Session,
        record_id: int,
        *,
        status: str,
        stats_update: Mapping[str, Any],
        now: datetime,
    ) -> MaintenanceRecord:
        """Settle a pending (planned) record inside the caller's write transaction.

        Raise NotFound if no record by that id is pending.
        """
        record = session.get(MaintenanceRecord, record_id)
        if record is None or record.status != RecordStatus.PLANNED:
            raise NotFound("pending record", record_id)
        record.status = status
        record.finished_at = now
        record.stats = {**(record.stats or {}), **stats_update}
        return record

    def write_bare_record(self, namespace: str, job: str, *, now: datetime, **fields: Any) -> int:
        """Write a record without operations (a refused, failed or pending run)."""
        with transaction(self._write) as session:
            record = MaintenanceRecord(
                job=job, namespace=namespace, started_at=now, finished_at=now, **fields
            )
            session.add(record)
            session.flush()
            return record.id

    # -- namespace state -----------------------------------------------------------------------

    def revision(self, namespace: str) -> int:
        return reads.revision(self.engine, namespace)

    def namespaces(self) -> list[str]:
        with self.reading() as session:
            return list(
                session.scalars(select(Memory.namespace).distinct().order_by(Memory.namespace))
            )

    def largest_namespaces(self, limit: int) -> list[str]:
        """Return up to ``limit`` namespaces, those with the most active memories first."""
        count = func.count().label("count")
        with self.reading() as session:
            rows = session.execute(
                select(Memory.namespace, count)
                .where(Memory.status == MemoryStatus.ACTIVE.value)
                .group_by(Memory.namespace)
                .order_by(count.desc(), Memory.namespace)
                .limit(limit)
            )
            return [namespace for namespace, _ in rows]

    def lexical_rows(
        self, namespace: str, *, after_id: int = 0, limit: int | None = None
    ) -> list[LexicalRow]:
        """Return the active memories with id > ``after_id`` (the first ``limit``), by id."""
        return reads.lexical_rows(self.engine, namespace, after_id=after_id, limit=limit)

    # -- reinforcement -------------------------------------------------------------------------

    def reinforce(
        self, counts: Mapping[int, int], *, now: datetime, step: float, max_boost: float
    ) -> None:
        """Record recalls: bump access_count and last_accessed, nudge base_importance (bounded).

        Recall statistics are not content: no version bump, no record, no index work.
        """
        by_count: dict[int, list[int]] = {}
        for memory_id, count in counts.items():
            by_count.setdefault(count, []).append(memory_id)
        least, greatest = (
            (func.min, func.max)
            if self.engine.dialect.name == "sqlite"
            else (func.least, func.greatest)
        )
        # Never above the cap, and never lowered by a recall if it already was above it.
        cap = least(10.0, Memory.importance + max_boost)
        with transaction(self._write) as session:
            for count, ids in sorted(by_count.items()):
                nudged = least(
                    Memory.base_importance + step * count, greatest(cap, Memory.base_importance)
                )
                for chunk in _chunks(sorted(ids)):
                    session.execute(
                        update(Memory)
                        .where(Memory.id.in_(chunk))
                        .values(
                            access_count=Memory.access_count + count,
                            last_accessed=now,
                            base_importance=nudged,
                        )
                        .execution_options(synchronize_session=False)
                    )

    # -- logs ----------------------------------------------------------------------------------

    def add_logs(self, namespace: str, items: Sequence[LogIn], *, now: datetime) -> AddResult:
        """Insert conversation log lines not seen before (by idempotency key)."""
        keys = [item.key() for item in items]
        with transaction(self._write) as session:
            existing: dict[str, int] = {}
            for chunk in _chunks(sorted(set(keys))):
                rows = session.execute(
                    select(ConversationLog.idempotency_key, ConversationLog.id).where(
                        ConversationLog.namespace == namespace,
                        ConversationLog.idempotency_key.in_(chunk),
                    )
                )
                existing.update({key: log_id for key, log_id in rows})
            ids: list[int] = []
            created: list[int] = []
            for item, key in zip(items, keys, strict=True):
                if key in existing:
                    ids.append(existing[key])
                    continue
                log = ConversationLog(
                    namespace=namespace,
                    session_id=item.session_id,
                    role=item.role,
                    content=item.content,
                    timestamp=item.timestamp,
                    pair_id=item.pair_id,
                    idempotency_key=key,
                    created_at=now,
                )
                session.add(log)
                session.flush()
                existing[key] = log.id
                ids.append(log.id)
                created.append(log.id)
        return AddResult(ids=tuple(ids), created=tuple(created), record_id=None)

    # -- records -------------------------------------------------------------------------------

    def records(self, namespace: str | None = None, *, limit: int = 100) -> list[MaintenanceRecord]:
        with self.reading() as session:
            query = select(MaintenanceRecord).order_by(MaintenanceRecord.id.desc()).limit(limit)
            if namespace is not None:
                query = query.where(MaintenanceRecord.namespace == namespace)
            return list(session.scalars(query))

    def record(self, record_id: int) -> tuple[MaintenanceRecord, list[MaintenanceOperation]]:
        with self.reading() as session:
            record = session.get(MaintenanceRecord, record_id)
            if record is None:
                raise NotFound("record", record_id)
            operations = session.scalars(
                select(MaintenanceOperation)
                .where(MaintenanceOperation.record_id == record_id)
                .order_by(MaintenanceOperation.seq)
            )
            return record, list(operations)

    def memory_history(self, namespace: str, memory_id: int) -> list[MaintenanceRecord]:
        """Return the records whose operations touched the memory, oldest first."""
        with self.reading() as session:
            touching = select(MaintenanceOperation.record_id).where(
                MaintenanceOperation.target_kind == "memory",
                MaintenanceOperation.target_id == memory_id,
            )
            return list(
                session.scalars(
                    select(MaintenanceRecord)
                    .where(
                        MaintenanceRecord.namespace == namespace,
                        MaintenanceRecord.id.in_(touching),
                    )
                    .order_by(MaintenanceRecord.id)
                )
            )

    # -- the vector index outbox -----------------------------------------------------------------

    def outbox(self, *, limit: int, namespace: str | None = None) -> list[IndexOutbox]:
        with self.reading() as session:
            query = select(IndexOutbox).order_by(IndexOutbox.id).limit(limit)
            if namespace is not None:
                query = query.where(IndexOutbox.namespace == namespace)
            return list(session.scalars(query))

    def outbox_size(self) -> int:
        with self.reading() as session:
            return int(session.scalar(select(func.count()).select_from(IndexOutbox)) or 0)

    def ack_outbox(self, ids: Sequence[int]) -> None:
        """Remove outbox entries that the index has applied."""
        with transaction(self._write) as session:
            for chunk in _chunks(sorted(ids)):
                session.execute(delete(IndexOutbox).where(IndexOutbox.id.in_(chunk)))

    def index_state(self, namespace: str) -> dict[int, int]:
        """Return id -> version of the active memories: what the vector index should hold."""
        with self.reading() as session:
            rows = session.execute(
                select(Memory.id, Memory.version).where(
                    Memory.namespace == namespace, Memory.status == MemoryStatus.ACTIVE.value
                )
            )
            return {memory_id: version for memory_id, version in rows}

    # -- export and restore --------------------------------------------------------------------

    def export(self, namespace: str) -> Iterator[str]:
        """Yield the namespace as deterministic JSON lines: memories, then relations, by id."""
        with self.reading() as session:
            for memory in session.scalars(
                select(Memory).where(Memory.namespace == namespace).order_by(Memory.id)
            ):
                yield _line({"kind": "memory", **memory_image(memory)})
            for relation in session.scalars(
                select(MemoryRelation)
                .where(MemoryRelation.namespace == namespace)
                .order_by(MemoryRelation.id)
            ):
                yield _line({"kind": "relation", **relation_image(relation)})

    def restore(
        self, namespace: str, images: Sequence[Mapping[str, Any]], *, now: datetime
    ) -> AddResult:
        """Re-create exported rows with their ids; rows already present unchanged are skipped.

        Raise ValidationFailed if an id is taken by a different row or the export names another
        namespace.
        """
        memories = [dict(i) for i in images if i.get("kind") == "memory"]
        relations = [dict(i) for i in images if i.get("kind") == "relation"]
        wrong = {i.get("namespace") for i in memories + relations} - {namespace}
        if wrong:
            raise ValidationFailed(
                [("export", f"lines of namespace {sorted(map(str, wrong))[0]!r}")]
            )
        with self.changing(namespace, "restore", now) as (session, changes):
            created = self._restore_memories(session, changes, memories)
            self._restore_relations(session, changes, relations)
            record_id = changes.record.id
        return AddResult(
            ids=tuple(int(m["id"]) for m in memories), created=tuple(created), record_id=record_id
        )

    def _restore_memories(
        self, session: Session, changes: ChangeSet, memories: list[dict[str, Any]]
    ) -> list[int]:
        created: list[int] = []
        rows: list[tuple[Memory, dict[str, Any]]] = []
        for image in memories:
            image.pop("kind")
            values = memory_values(image)
            current = session.get(Memory, values["id"])
            if current is not None:
                if memory_image(current) != image:
                    raise ValidationFailed(
                        [(f"memory {values['id']}", "id is taken by a different memory")]
                    )
                continue
            links = {"prev_id": values.pop("prev_id"), "next_id": values.pop("next_id")}
            memory = Memory(**values)
            session.add(memory)
            rows.append((memory, links))
        try:
            session.flush()
        except IntegrityError as exc:
            raise ValidationFailed([("export", f"cannot restore: {exc.orig}")]) from None
        for memory, links in rows:
            memory.prev_id, memory.next_id = links["prev_id"], links["next_id"]
            changes.created(memory)
            created.append(memory.id)
        return created

    def _restore_relations(
        self, session: Session, changes: ChangeSet, relations: list[dict[str, Any]]
    ) -> None:
        for image in relations:
            image.pop("kind")
            values = relation_values(image)
            if session.get(MemoryRelation, values["id"]) is not None:
                continue
            relation = MemoryRelation(**values)
            session.add(relation)
            session.flush()
            changes.created(relation)

    # -- search reads --------------------------------------------------------------------------

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        """Return what ranking needs of the *active* memories among ``ids``, by id."""
        return reads.search_rows(self.engine, namespace, ids)

    def filtered_rows(
        self, namespace: str, *, limit: int, **filters: Any
    ) -> list[SearchRow] | None:
        """Return the active memories that may pass ``filters`` (see reads.filtered_rows)."""
        return reads.filtered_rows(self.engine, namespace, limit=limit, **filters)


def _line(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _identity(item: MemoryIn) -> object:
    if item.external_id:
        return ("ext", item.external_id)
    return ("hash", content_hash(item.content), item.session_id, item.timestamp)


def _new_memory(namespace: str, item: MemoryIn, *, now: datetime, source: str) -> Memory:
    importance = item.importance if item.importance is not None else 5
    return Memory(
        namespace=namespace,
        external_id=item.external_id,
        content=item.content,
        content_hash=content_hash(item.content),
        type=item.type,
        tags=list(item.tags),
        importance=importance,
        base_importance=float(importance),
        access_count=0,
        last_accessed=None,
        event_time=item.timestamp or now,
        created_at=now,
        updated_at=now,
        session_id=item.session_id,
        status=MemoryStatus.ACTIVE.value,
        pinned=item.pinned,
        source=source,
        metadata_=dict(item.metadata),
        version=1,
    )
