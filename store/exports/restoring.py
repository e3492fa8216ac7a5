"""Putting exported rows back: checking them against the store, inserting them with their ids.

``check_export`` runs inside the restoring transaction, after ``store.exports.lines`` checked the
file on its own: a line whose row is stored as it is in the file is skipped; one whose id (or
external id, idempotency key, edge) is taken by a row with other content is a conflict; a link
(a relation's ends, a memory's timeline neighbours or replacement, an undo's record) to a row
that is neither in the file nor in the store, or a relation end in another namespace, is a
problem. The ``insert_*`` functions write the rows with their exported ids; ``advance_ids``
moves PostgreSQL's id sequences past them, so that later rows get new ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import inspect as sa_inspect
from sqlalchemy import select, text, tuple_
from sqlalchemy.orm import Session

from store.clock import parse_timestamp
from store.exports.lines import Export, Labelled, line_key
from store.images import memory_image, memory_values, relation_image, relation_values
from store.models import (
    Base,
    ConversationLog,
    JobState,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
    ScheduleEntry,
    UTCDateTime,
)

Problem = tuple[str, str]
# Tables whose ids a restore writes (and so PostgreSQL's sequences must pass).
ID_TABLES: tuple[type[Base], ...] = (
    Memory,
    MemoryRelation,
    ConversationLog,
    MaintenanceRecord,
)
_LINKS = ("prev_id", "next_id", "replaced_by_id")


# -- images of the rows a memory export does not hold ------------------------------------------


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def row_image(row: Base) -> dict[str, Any]:
    """Every column of a row as JSON-able data (keys are attribute names)."""
    return {attr.key: _plain(getattr(row, attr.key)) for attr in sa_inspect(type(row)).column_attrs}


def log_image(row: ConversationLog) -> dict[str, Any]:
    return row_image(row)


def record_image(
    row: MaintenanceRecord, operations: Iterable[MaintenanceOperation]
) -> dict[str, Any]:
    """A record with its operations in order (an operation's own id is not part of it)."""
    steps = [
        {k: v for k, v in row_image(op).items() if k not in {"id", "record_id"}}
        for op in sorted(operations, key=lambda op: op.seq)
    ]
    return {**row_image(row), "operations": steps}


def _values(model: type[Base], image: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values from an image: ISO strings of date-time columns parsed."""
    values: dict[str, Any] = {}
    for attr in sa_inspect(model).column_attrs:
        value = image[attr.key]
        if value is not None and isinstance(attr.columns[0].type, UTCDateTime):
            value = parse_timestamp(value)
        values[attr.key] = value
    return values


# -- checking ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Checked:
    """What the store says about an export: problems, conflicts, and the lines already in it."""

    problems: list[Problem] = field(default_factory=list)
    conflicts: list[Problem] = field(default_factory=list)
    present: set[tuple[str, object]] = field(default_factory=set)

    def new(self, kind: str, entries: Sequence[Labelled]) -> list[Any]:
        """The lines of ``entries`` not in the store yet."""
        return [e.line for e in entries if (kind, line_key(e.line)) not in self.present]


def check_export(session: Session, export: Export) -> Checked:
    """Compare an export with the store (see the module docstring)."""
    checked = Checked()
    _check_memories(session, export, checked)
    _check_relations(session, export, checked)
    _check_logs(session, export, checked)
    _check_records(session, export, checked)
    for entry in export.job_states:
        key = (entry.line.job, entry.line.namespace)
        state = session.get(JobState, key)
        _compare(checked, entry, "job_state", key, row_image(state) if state else None)
    for entry in export.schedules:
        schedule = session.get(ScheduleEntry, entry.line.job)
        _compare(
            checked, entry, "schedule", entry.line.job, row_image(schedule) if schedule else None
        )
    return checked


def _compare(
    checked: Checked, entry: Labelled, kind: str, key: object, stored: Mapping[str, Any] | None
) -> None:
    if stored is None:
        return
    if dict(stored) == entry.line.image():
        checked.present.add((kind, key))
        return
    what = f"{kind.replace('_', ' ')} {key}"
    line_namespace = getattr(entry.line, "namespace", None)
    if line_namespace is not None and stored.get("namespace") != line_namespace:
        checked.conflicts.append(
            (
                entry.label,
                f"{what} is in the store, in another namespace: ids belong to one store; to "
                "copy an export into another namespace, use `secretary import FILE --namespace "
                "NEW`",
            )
        )
        return
    checked.conflicts.append((entry.label, f"{what} is in the store with other content"))


def _check_memories(session: Session, export: Export, checked: Checked) -> None:
    lines = {e.line.id: e for e in export.memories}
    stored = _by_id(session, Memory, lines)
    for memory_id, entry in lines.items():
        memory = stored.get(memory_id)
        _compare(checked, entry, "memory", memory_id, memory_image(memory) if memory else None)
    taken = _external_ids(session, [e.line for e in export.memories if e.line.external_id])
    for entry in export.memories:
        line = entry.line
        other = taken.get((line.namespace, line.external_id))
        if other is not None and other != line.id:
            checked.conflicts.append(
                (entry.label, f"external_id {line.external_id!r} is memory {other} in the store")
            )
    wanted = {getattr(e.line, name) for e in export.memories for name in _LINKS} - {None}
    known = _namespaces_of(session, wanted - lines.keys())
    known.update({i: e.line.namespace for i, e in lines.items()})
    for entry in export.memories:
        for name in _LINKS:
            other = getattr(entry.line, name)
            if other is not None and known.get(other) != entry.line.namespace:
                checked.problems.append(
                    (entry.label, f"{name}: memory {other} is {_missing(entry.line.namespace)}")
                )


def _missing(namespace: str) -> str:
    return f"neither in the file nor in namespace {namespace!r}"


def _check_relations(session: Session, export: Export, checked: Checked) -> None:
    lines = {e.line.id: e for e in export.relations}
    stored = _by_id(session, MemoryRelation, lines)
    for relation_id, entry in lines.items():
        relation = stored.get(relation_id)
        image = relation_image(relation) if relation else None
        _compare(checked, entry, "relation", relation_id, image)
    in_file = {e.line.id: e.line.namespace for e in export.memories}
    ends = {end for e in export.relations for end in (e.line.source_id, e.line.target_id)}
    known = {**_namespaces_of(session, ends - in_file.keys()), **in_file}
    edges = _edges(session, [e.line for e in export.relations])
    for entry in export.relations:
        line = entry.line
        for end in (line.source_id, line.target_id):
            if end not in known:
                checked.problems.append(
                    (entry.label, f"memory {end} is {_missing(line.namespace)}")
                )
            elif known[end] != line.namespace:
                checked.problems.append(
                    (
                        entry.label,
                        f"relation of namespace {line.namespace!r} joins memory {end} of "
                        f"namespace {known[end]!r}: a relation stays inside one namespace",
                    )
                )
        other = edges.get((line.source_id, line.target_id, line.type))
        if other is not None and other != line.id:
            checked.conflicts.append((entry.label, f"the same edge is relation {other}"))


def _check_logs(session: Session, export: Export, checked: Checked) -> None:
    lines = {e.line.id: e for e in export.logs}
    stored = _by_id(session, ConversationLog, lines)
    for log_id, entry in lines.items():
        log = stored.get(log_id)
        _compare(checked, entry, "log", log_id, log_image(log) if log else None)
    pairs = sorted({(e.line.namespace, e.line.idempotency_key) for e in export.logs})
    taken: dict[tuple[str, str], int] = {}
    for chunk in _chunks(pairs):
        rows = session.execute(
            select(
                ConversationLog.namespace, ConversationLog.idempotency_key, ConversationLog.id
            ).where(tuple_(ConversationLog.namespace, ConversationLog.idempotency_key).in_(chunk))
        )
        taken.update({(ns, key): log_id for ns, key, log_id in rows})
    for entry in export.logs:
        line = entry.line
        other = taken.get((line.namespace, line.idempotency_key))
        if other is not None and other != line.id:
            checked.conflicts.append(
                (entry.label, f"idempotency_key {line.idempotency_key!r} is log line {other}")
            )


def _check_records(session: Session, export: Export, checked: Checked) -> None:
    lines = {e.line.id: e for e in export.records}
    stored = _by_id(session, MaintenanceRecord, lines)
    for record_id, entry in lines.items():
        row = stored.get(record_id)
        if row is not None:
            operations = session.scalars(
                select(MaintenanceOperation).where(MaintenanceOperation.record_id == record_id)
            )
            _compare(checked, entry, "record", record_id, record_image(row, operations))
    wanted = {e.line.undoes_id for e in export.records} | {
        e.line.undone_by_id for e in export.records
    }
    missing = (wanted - {None}) - lines.keys()
    found = set(_by_id(session, MaintenanceRecord, missing))
    for entry in export.records:
        for name in ("undoes_id", "undone_by_id"):
            other = getattr(entry.line, name)
            if other in missing and other not in found:
                checked.problems.append(
                    (entry.label, f"{name}: record {other} is neither in the file nor the store")
                )


def _by_id(session: Session, model: Any, ids: Iterable[int]) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for chunk in _chunks(sorted(ids)):
        found.update(
            {row.id: row for row in session.scalars(select(model).where(model.id.in_(chunk)))}
        )
    return found


def _namespaces_of(session: Session, ids: Iterable[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for chunk in _chunks(sorted(ids)):
        rows = session.execute(select(Memory.id, Memory.namespace).where(Memory.id.in_(chunk)))
        found.update({memory_id: namespace for memory_id, namespace in rows})
    return found


def _external_ids(session: Session, lines: Sequence[Any]) -> dict[tuple[str, str], int]:
    pairs = sorted({(line.namespace, line.external_id) for line in lines})
    taken: dict[tuple[str, str], int] = {}
    for chunk in _chunks(pairs):
        rows = session.execute(
            select(Memory.namespace, Memory.external_id, Memory.id).where(
                tuple_(Memory.namespace, Memory.external_id).in_(chunk)
            )
        )
        taken.update({(ns, str(ext)): memory_id for ns, ext, memory_id in rows})
    return taken


def _edges(session: Session, lines: Sequence[Any]) -> dict[tuple[int, int, str], int]:
    triples = sorted({(line.source_id, line.target_id, line.type) for line in lines})
    found: dict[tuple[int, int, str], int] = {}
    R = MemoryRelation
    for chunk in _chunks(triples):
        rows = session.execute(
            select(R.source_id, R.target_id, R.type, R.id).where(
                tuple_(R.source_id, R.target_id, R.type).in_(chunk)
            )
        )
        found.update({(s, t, kind): relation_id for s, t, kind, relation_id in rows})
    return found


def _chunks(values: Sequence[Any], size: int = 300) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


# -- inserting ---------------------------------------------------------------------------------


def insert_memories(session: Session, lines: Sequence[Any]) -> list[Memory]:
    """Insert memories with their ids; links are set once every row of the batch exists."""
    rows: list[tuple[Memory, dict[str, Any]]] = []
    for line in lines:
        values = memory_values(line.image())
        links = {name: values.pop(name) for name in _LINKS}
        memory = Memory(**values)
        session.add(memory)
        rows.append((memory, links))
    session.flush()
    for memory, links in rows:
        for name, value in links.items():
            setattr(memory, name, value)
    session.flush()
    return [memory for memory, _ in rows]


def new_relations(lines: Sequence[Any]) -> list[MemoryRelation]:
    return [MemoryRelation(**relation_values(line.image())) for line in lines]


def insert_logs(session: Session, lines: Sequence[Any]) -> None:
    session.add_all(ConversationLog(**_values(ConversationLog, line.image())) for line in lines)
    session.flush()


def insert_records(session: Session, lines: Sequence[Any]) -> None:
    """Insert records with their operations; undo links once every record exists."""
    links: list[tuple[MaintenanceRecord, Any]] = []
    for line in lines:
        image = line.image()
        image.pop("operations")
        record = MaintenanceRecord(
            **{**_values(MaintenanceRecord, image), "undoes_id": None, "undone_by_id": None}
        )
        session.add(record)
        links.append((record, line))
    session.flush()
    for record, line in links:
        record.undoes_id, record.undone_by_id = line.undoes_id, line.undone_by_id
        session.add_all(
            MaintenanceOperation(record_id=line.id, **_step_values(step.model_dump()))
            for step in line.operations
        )
    session.flush()


def _step_values(step: Mapping[str, Any]) -> dict[str, Any]:
    return {k: step[k] for k in ("seq", "op", "target_kind", "target_id", "before", "after")}


def insert_job_states(session: Session, lines: Sequence[Any]) -> None:
    session.add_all(JobState(**_values(JobState, line.image())) for line in lines)


def insert_schedules(session: Session, lines: Sequence[Any]) -> None:
    session.add_all(ScheduleEntry(**_values(ScheduleEntry, line.image())) for line in lines)


def advance_ids(session: Session, models: Iterable[type[Base]] = ID_TABLES) -> None:
    """Move PostgreSQL's id sequences past the largest ids (rows inserted with their own ids do
    not move them); never back. SQLite needs nothing: it keeps counting past the largest id."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for model in models:
        table = model.__table__.name  # type: ignore[attr-defined]
        session.execute(
            text(
                "SELECT setval(seq, top) FROM (SELECT pg_get_serial_sequence(:t, 'id') AS seq, "
                f"(SELECT MAX(id) FROM {table}) AS top) s "
                "WHERE top IS NOT NULL AND top > COALESCE(pg_sequence_last_value(seq::regclass), 0)"
            ),
            {"t": table},
        )


def largest_id(session: Session) -> int:
    """Return the largest id any row of the id tables has or had (SQLite's counters, PostgreSQL's
    sequences): ids above it are free in every table."""
    top = 0
    dialect = session.get_bind().dialect.name
    for model in (*ID_TABLES, MaintenanceOperation):
        table = model.__table__.name  # type: ignore[attr-defined]
        top = max(top, int(session.scalar(text(f"SELECT COALESCE(MAX(id), 0) FROM {table}")) or 0))
        if dialect == "postgresql":
            used = session.scalar(
                text("SELECT pg_sequence_last_value(pg_get_serial_sequence(:t, 'id')::regclass)"),
                {"t": table},
            )
            top = max(top, int(used or 0))
    if dialect == "sqlite":
        has = session.scalar(text("SELECT name FROM sqlite_master WHERE name = 'sqlite_sequence'"))
        if has:
            top = max(
                top,
                int(session.scalar(text("SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence")) or 0),
            )
    return top
