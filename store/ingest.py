"""Ingesting JSONL files: memories, conversation logs, or an export to restore.

A file is validated whole before anything is written: one bad line rejects the file, and every
bad line is reported with its number. Valid files are then written in transactions of
``commit_every`` lines; re-ingesting a file changes nothing, so an interrupted ingest is finished
by running it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from store.errors import ValidationFailed
from store.schemas import Limits, LogIn, MemoryIn, parse_items
from store.service import Store

Kind = Literal["memories", "logs", "export"]
Advance = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class IngestReport:
    kind: Kind
    lines: int
    created: int
    skipped: int
    records: tuple[int, ...]


def _numbered(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


def _decode(number: int, line: str) -> tuple[Any, tuple[str, str] | None]:
    try:
        return json.loads(line), None
    except json.JSONDecodeError as exc:
        return None, (f"line {number}", f"not valid JSON: {exc.msg} at column {exc.colno}")


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


def validate_file(path: Path, kind: Kind, limits: Limits) -> int:
    """Check every line; return how many. Raise ValidationFailed listing every bad one."""
    unbounded = replace(limits, max_batch=2**62)  # a file is not an API batch
    problems: list[tuple[str, str]] = []
    lines = 0
    for objects, labels, json_problems in _batches(path, 5000):
        problems.extend(json_problems)
        lines += len(objects) + len(json_problems)
        if kind == "logs":
            problems.extend(parse_items(LogIn, objects, unbounded, labels=labels)[1])
        elif kind == "memories":
            problems.extend(parse_items(MemoryIn, objects, unbounded, labels=labels)[1])
        else:
            problems.extend(
                (label, 'not an export line (no "kind")')
                for obj, label in zip(objects, labels, strict=True)
                if not isinstance(obj, dict) or obj.get("kind") not in {"memory", "relation"}
            )
    if problems:
        raise ValidationFailed(sorted(problems, key=_line_order))
    return lines


def _line_order(problem: tuple[str, str]) -> int:
    where = problem[0]
    return int(where.split()[-1]) if where.startswith("line ") else 0


def ingest_file(
    store: Store,
    path: Path,
    *,
    namespace: str,
    logs: bool = False,
    now: datetime,
    advance: Advance | None = None,
) -> IngestReport:
    """Validate the whole file, then write it; return what was created and what was skipped."""
    kind = detect_kind(path, logs=logs)
    lines = validate_file(path, kind, store.limits)
    if kind == "export":
        objects = [obj for batch, _, _ in _batches(path, 2**31) for obj in batch]
        result = store.repository.restore(namespace, objects, now=now)
        if advance is not None:
            advance(lines)
        created = len(result.created)
        return IngestReport(
            kind=kind,
            lines=lines,
            created=created,
            skipped=len(result.ids) - created,
            records=(result.record_id,) if result.record_id and created else (),
        )
    created = skipped = 0
    records: list[int] = []
    unbounded = replace(store.limits, max_batch=2**62)
    for objects, labels, _ in _batches(path, store.settings.ingest.commit_every):
        if kind == "logs":
            log_items, problems = parse_items(LogIn, objects, unbounded, labels=labels)
            _raise_if(problems)
            result = store.repository.add_logs(namespace, log_items, now=now)
        else:
            items, problems = parse_items(MemoryIn, objects, unbounded, labels=labels)
            _raise_if(problems)
            result = store.repository.add_memories(namespace, items, now=now, source="ingest")
        created += len(result.created)
        skipped += result.skipped
        if result.record_id is not None:
            records.append(result.record_id)
        if advance is not None:
            advance(len(objects))
    return IngestReport(
        kind=kind, lines=lines, created=created, skipped=skipped, records=tuple(records)
    )


def _raise_if(problems: list[tuple[str, str]]) -> None:
    # Only reachable if the file changed between validation and writing.
    if problems:
        raise ValidationFailed(problems)


def count_lines(path: Path) -> int:
    return sum(1 for _ in _numbered(path))
