"""Ingesting JSONL files: memories, conversation logs, or an export to restore.

A file is validated whole before anything is written: one bad line rejects the file, and every
bad line is reported with its number. Valid files are then written in transactions of
``commit_every`` lines, each with its record; re-ingesting a file changes nothing, so an
interrupted ingest is finished by running it again. That holds for an update too (the lines
already applied then match), but the transactions it committed before it was interrupted stay
applied, each its own record to undo: the caller hears of each as it commits (``committed``).
One transaction for a whole file would hold the database's write lock (SQLite has one) and every
row of the file until the end, for longer than other writers wait.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from store.conflicts import OnConflict, fingerprint, identity
from store.errors import IdConflict, ValidationFailed
from store.exports.backup import ImportReport, import_export
from store.exports.lines import NAMESPACE_KINDS, WHOLE_STORE_LINE, other_namespace, parse_export
from store.schemas import Limits, LogIn, MemoryIn, parse_items, surrogate_problems
from store.service import Store

Kind = Literal["memories", "logs", "export"]
Advance = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class Committed:
    """One transaction of an ingest, committed: its lines, its record and what it did."""

    first_line: int
    last_line: int
    record_id: int | None  # None: it changed nothing (every line was there already)
    created: int
    updated: int
    skipped: int


@dataclass(frozen=True, kw_only=True)
class IngestReport:
    kind: Kind
    lines: int
    created: int
    skipped: int
    records: tuple[int, ...]
    updated: int = 0  # stored ones given a line's other content (--update)
    relations: int = 0  # of ``created``, the relations an export brought


def _numbered(path: Path) -> Iterator[tuple[int, str]]:
    # Bytes that are not UTF-8 come through as lone surrogates, for _decode to report by line.
    with path.open(encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


def _decode(number: int, line: str) -> tuple[Any, tuple[str, str] | None]:
    bad = next((i for i, char in enumerate(line) if "\udc80" <= char <= "\udcff"), None)
    if bad is not None:
        byte = ord(line[bad]) - 0xDC00
        return None, (f"line {number}", f"not valid UTF-8: byte 0x{byte:02x} at column {bad + 1}")
    text = line.rstrip("\r\n")  # else a problem at its end is at "column 1" of the next line
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        end = " (the end of the line)" if exc.pos >= len(text) else ""
        return None, (f"line {number}", f"not valid JSON: {exc.msg} at column {exc.colno}{end}")


def _batches(path: Path, size: int) -> Iterator[tuple[list[Any], list[str], list[tuple[str, str]]]]:
    """Yield (objects, labels, JSON problems) for runs of up to ``size`` non-blank lines."""
    objects: list[Any] = []
    labels: list[str] = []
    problems: list[tuple[str, str]] = []
    for number, line in _numbered(path):
        value, problem = _decode(number, line)
        if problem is not None:
            problems.append(problem)
            continue
        objects.append(value)
        labels.append(f"line {number}")
        if len(objects) >= size:
            yield objects, labels, problems
            objects, labels, problems = [], [], []
    if objects or problems:
        yield objects, labels, problems


def detect_kind(path: Path, *, logs: bool) -> Kind:
    """Return "export" when the first line is an export line (it has a "kind"), else by flag."""
    for number, line in _numbered(path):
        value, _ = _decode(number, line)
        if isinstance(value, dict) and "kind" in value:
            return "export"
        break
    return "logs" if logs else "memories"


def validate_file(path: Path, kind: Kind, limits: Limits, *, namespace: str | None = None) -> int:
    """Check every line; return how many. Raise ValidationFailed listing every bad one (for an
    export, a line of another namespace than ``namespace`` too; see store.exports.lines).

    With no bad line, two lines naming one memory (external id, or content, session and time)
    or one log line (idempotency key) with different content are a conflict: raise IdConflict
    naming each (as the API does for two items of a batch).
    """
    unbounded = replace(limits, max_batch=2**62)  # a file is not an API batch
    problems: list[tuple[str, str]] = []
    lines = 0
    seen: dict[object, tuple[str, str]] = {}  # identity -> (label, fingerprint)
    repeated: list[tuple[str, str]] = []
    export: list[tuple[list[Any], list[str]]] = []
    for objects, labels, json_problems in _batches(path, 5000):
        problems.extend(json_problems)
        lines += len(objects) + len(json_problems)
        if kind == "export":
            export.append((objects, labels))
            continue
        items: Sequence[MemoryIn | LogIn]
        if kind == "logs":
            items, item_problems = parse_items(LogIn, objects, unbounded, labels=labels)
        else:
            items, item_problems = parse_items(MemoryIn, objects, unbounded, labels=labels)
        problems.extend(item_problems)
        bad = {label for label, _ in item_problems}
        good = [label for label in labels if label not in bad]
        repeated.extend(_repeated(items, good, seen))
    if kind == "export":
        objects = [obj for batch, _ in export for obj in batch]
        labels = [label for _, batch in export for label in batch]
        objects, labels = _texts_only(objects, labels, problems)
        parsed, export_problems = parse_export(
            objects, labels, kinds=NAMESPACE_KINDS, other_kinds=WHOLE_STORE_LINE
        )
        problems.extend(export_problems)
        if namespace is not None:
            problems.extend(
                (entry.label, other_namespace(entry.line.namespace, namespace))
                for entry in (*parsed.memories, *parsed.relations)
                if entry.line.namespace != namespace
            )
    if problems:
        raise ValidationFailed(sorted(problems, key=_line_order))
    if repeated:
        raise IdConflict(repeated)
    return lines


def _texts_only(
    objects: Sequence[Any], labels: Sequence[str], problems: list[tuple[str, str]]
) -> tuple[list[Any], list[str]]:
    """Return the export lines whose strings are all Unicode text, adding a problem naming the
    field of each other one (a lone surrogate, as JSON's "\\ud800", which nothing can store)."""
    kept: list[Any] = []
    kept_labels: list[str] = []
    for obj, label in zip(objects, labels, strict=True):
        bad = surrogate_problems(obj) if isinstance(obj, dict) else []
        problems.extend((label, f"{field}: {what}" if field else what) for field, what in bad)
        if not bad:
            kept.append(obj)
            kept_labels.append(label)
    return kept, kept_labels


def _repeated(
    items: Sequence[MemoryIn | LogIn],
    labels: Sequence[str],
    seen: dict[object, tuple[str, str]],
) -> list[tuple[str, str]]:
    """Items naming what an earlier line named, with different content."""
    problems = []
    for item, label in zip(items, labels, strict=True):
        key: object = item.key() if isinstance(item, LogIn) else identity(item)
        digest = fingerprint(item)
        first = seen.setdefault(key, (label, digest))
        if first[1] != digest:
            what = (
                f"idempotency_key {key!r}"
                if isinstance(item, LogIn)
                else f"external_id {item.external_id!r}"
                if item.external_id
                else "the same content, session and time"
            )
            problems.append((label, f"{what} is also on {first[0]}, with different content"))
    return problems


def _line_order(problem: tuple[str, str]) -> int:
    return _line_number(problem[0])


def _line_number(label: str) -> int:
    """The number of a label "line N" (0 for another label)."""
    return int(label.split()[-1]) if label.startswith("line ") else 0


def ingest_file(
    store: Store,
    path: Path,
    *,
    namespace: str,
    logs: bool = False,
    update: bool = False,
    now: datetime,
    advance: Advance | None = None,
    committed: Callable[[Committed], None] | None = None,
) -> IngestReport:
    """Validate the whole file, then write it; return what was created, updated and skipped.

    A line naming a stored memory (or log line) with other content is a conflict: raise
    IdConflict naming every such line before writing any, unless ``update`` asks for the
    stored one to take the line's fields. Raise ValidationFailed for bad lines, and for
    ``update`` with an export (restored as it was).

    The lines are written in transactions of ``ingest.commit_every``; ``committed`` hears of
    each once it has committed (what stays applied if the ingest is cut short after it).
    """
    kind = detect_kind(path, logs=logs)
    if update and kind == "export":
        raise ValidationFailed([("--update", "an export is restored as it was: drop --update")])
    lines = validate_file(path, kind, store.limits, namespace=namespace)
    if kind == "export":
        batches = list(_batches(path, 2**31))
        objects = [obj for batch, _, _ in batches for obj in batch]
        labels = [label for _, batch, _ in batches for label in batch]
        result = store.db.writer.restore(namespace, objects, now=now, labels=labels)
        if advance is not None:
            advance(lines)
        created = len(result.created) + result.relations_created
        return IngestReport(
            kind=kind,
            lines=lines,
            created=created,
            skipped=len(result.ids) + result.relations - created,
            records=(result.record_id,) if result.record_id and created else (),
            relations=result.relations_created,
        )
    on_conflict: OnConflict = "update" if update else "error"
    _check_conflicts(store, path, kind, namespace, update=update)
    created = updated = skipped = 0
    records: list[int] = []
    unbounded = replace(store.limits, max_batch=2**62)
    for objects, labels, _ in _batches(path, store.settings.ingest.commit_every):
        if kind == "logs":
            log_items, problems = parse_items(LogIn, objects, unbounded, labels=labels)
            _raise_if(problems)
            result = store.db.writer.add_logs(
                namespace, log_items, now=now, on_conflict=on_conflict, labels=labels
            )
        else:
            items, problems = parse_items(MemoryIn, objects, unbounded, labels=labels)
            _raise_if(problems)
            result = store.db.writer.add_memories(
                namespace, items, now=now, source="ingest", on_conflict=on_conflict, labels=labels
            )
        created += len(result.created)
        updated += len(result.updated)
        skipped += result.skipped
        if result.record_id is not None:
            records.append(result.record_id)
        if committed is not None:
            committed(
                Committed(
                    first_line=_line_number(labels[0]),
                    last_line=_line_number(labels[-1]),
                    record_id=result.record_id,
                    created=len(result.created),
                    updated=len(result.updated),
                    skipped=result.skipped,
                )
            )
        if advance is not None:
            advance(len(objects))
    return IngestReport(
        kind=kind,
        lines=lines,
        created=created,
        updated=updated,
        skipped=skipped,
        records=tuple(records),
    )


def _check_conflicts(store: Store, path: Path, kind: Kind, namespace: str, *, update: bool) -> None:
    """Raise IdConflict naming every line that conflicts with the store, before any is written
    (a file is written in several transactions)."""
    unbounded = replace(store.limits, max_batch=2**62)
    problems: list[tuple[str, str]] = []
    reads = store.db.identities
    for objects, labels, _ in _batches(path, store.settings.ingest.commit_every):
        if kind == "logs":
            log_items, _ = parse_items(LogIn, objects, unbounded, labels=labels)
            problems += reads.log_conflicts(namespace, log_items, labels, update=update)
        else:
            items, _ = parse_items(MemoryIn, objects, unbounded, labels=labels)
            problems += reads.memory_conflicts(namespace, items, labels, update=update)
    if problems:
        raise IdConflict(problems)


def _raise_if(problems: list[tuple[str, str]]) -> None:
    # Only reachable if the file changed between validation and writing.
    if problems:
        raise ValidationFailed(problems)


def import_file(
    store: Store, path: Path, *, now: datetime, namespace: str | None = None
) -> ImportReport:
    """Validate a whole-store export (or a namespace's) line by line, then import it in one
    transaction (see store.exports.backup); ``namespace`` moves it into that (empty) namespace.

    Raise ValidationFailed naming every bad line, IdConflict for ids held by other content;
    nothing is written then.
    """
    batches = list(_batches(path, 2**31))
    problems = [problem for _, _, json_problems in batches for problem in json_problems]
    objects = [obj for batch, _, _ in batches for obj in batch]
    labels = [label for _, batch, _ in batches for label in batch]
    objects, labels = _texts_only(objects, labels, problems)
    export, line_problems = parse_export(objects, labels)
    problems.extend(line_problems)
    if problems:
        raise ValidationFailed(sorted(problems, key=_line_order))
    try:
        return import_export(store.engine, export, now=now, namespace=namespace)
    except ValidationFailed as exc:
        raise ValidationFailed(sorted(exc.problems, key=_line_order)) from None
    except IdConflict as exc:
        raise IdConflict(sorted(exc.problems, key=_line_order)) from None


def count_lines(path: Path) -> int:
    return sum(1 for _ in _numbered(path))
