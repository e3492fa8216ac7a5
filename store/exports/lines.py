"""Export lines: what `secretary export` writes and `ingest` and `import` read back, validated.

Each line is a JSON object with a ``kind``: ``memory`` and ``relation`` (every column of the row),
and in a whole-store export also ``log``, ``record`` (with its ``operations``), ``job_state`` and
``schedule``. ``parse_export`` checks every line (fields, types, timestamps, statuses) and the
file as a whole (an id twice with other content, a relation or a timeline link to a memory of
another namespace), and reports every problem with its line; what can only be checked against
the store (a link to a memory that is not in the file) is left to ``store.exports.restoring``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from store.clock import parse_timestamp
from store.kinds import MemoryStatus, RecordStatus
from store.schemas import problem_message
from store.text import content_hash

TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"


def _iso(value: str) -> str:
    try:
        return parse_timestamp(value).isoformat()  # as the store writes it back
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {value!r}") from None


Timestamp = Annotated[str, AfterValidator(_iso)]
Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
Namespace = Annotated[str, Field(min_length=1, max_length=128)]
Name = Annotated[str, Field(min_length=1, max_length=256)]
Real = Annotated[float, Field(allow_inf_nan=False)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_enum_values=True)

    def image(self) -> dict[str, Any]:
        """The row's columns as an image (store.images): the line without its kind."""
        return self.model_dump(exclude={"kind"})


class MemoryLine(_Line):
    kind: Literal["memory"]
    id: Id
    namespace: Namespace
    external_id: Name | None
    content: Annotated[str, Field(min_length=1)]
    content_hash: str
    type: Annotated[str, Field(pattern=TYPE_PATTERN)]
    tags: list[Annotated[str, Field(min_length=1)]]
    importance: Annotated[int, Field(ge=1, le=10)]
    base_importance: Real
    access_count: Annotated[int, Field(ge=0)]
    last_accessed: Timestamp | None
    event_time: Timestamp
    created_at: Timestamp
    updated_at: Timestamp
    session_id: Name | None
    prev_id: Id | None
    next_id: Id | None
    status: Annotated[MemoryStatus, Field(strict=False)]
    replaced_by_id: Id | None
    pinned: bool
    source: Annotated[str, Field(max_length=64)]
    metadata: dict[str, Any]
    version: Annotated[int, Field(ge=1)]


class RelationLine(_Line):
    kind: Literal["relation"]
    id: Id
    namespace: Namespace
    source_id: Id
    target_id: Id
    type: Annotated[str, Field(pattern=TYPE_PATTERN)]
    strength: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
    description: str
    created_at: Timestamp


class LogLine(_Line):
    kind: Literal["log"]
    id: Id
    namespace: Namespace
    session_id: Name
    role: Annotated[str, Field(min_length=1, max_length=32)]
    content: Annotated[str, Field(min_length=1)]
    timestamp: Timestamp
    pair_id: Annotated[str, Field(max_length=256)] | None
    idempotency_key: Name
    created_at: Timestamp


class OperationLine(_Line):
    seq: Annotated[int, Field(ge=0)]
    op: Annotated[str, Field(min_length=1, max_length=32)]
    target_kind: Literal["memory", "relation", "log"]
    target_id: Id
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class RecordLine(_Line):
    kind: Literal["record"]
    id: Id
    job: Annotated[str, Field(min_length=1, max_length=64)]
    namespace: Namespace
    status: Annotated[RecordStatus, Field(strict=False)]
    started_at: Timestamp
    finished_at: Timestamp | None
    model: Name | None
    prompts: list[dict[str, Any]]
    tokens_in: Annotated[int, Field(ge=0)]
    tokens_out: Annotated[int, Field(ge=0)]
    cost: Real | None
    stats: dict[str, Any]
    error: str | None
    undoes_id: Id | None
    undone_by_id: Id | None
    operations: list[OperationLine]


class JobStateLine(_Line):
    kind: Literal["job_state"]
    job: Annotated[str, Field(min_length=1, max_length=64)]
    namespace: Namespace
    state: dict[str, Any]
    health: dict[str, Any]
    updated_at: Timestamp


class ScheduleLine(_Line):
    kind: Literal["schedule"]
    job: Annotated[str, Field(min_length=1, max_length=64)]
    cron: Annotated[str, Field(min_length=1, max_length=128)] | None
    paused: bool
    last_fired_at: Timestamp | None
    last_finished_at: Timestamp | None
    next_fire_at: Timestamp | None
    updated_at: Timestamp


LINES: dict[str, type[_Line]] = {
    "memory": MemoryLine,
    "relation": RelationLine,
    "log": LogLine,
    "record": RecordLine,
    "job_state": JobStateLine,
    "schedule": ScheduleLine,
}
NAMESPACE_KINDS = frozenset({"memory", "relation"})  # what `export --namespace` writes
WHOLE_STORE_LINE = " of a whole-store export: restore it with `secretary import FILE`"


@dataclass(frozen=True)
class Labelled:
    label: str  # "line 12"
    line: Any  # one of the *Line models


@dataclass(frozen=True, kw_only=True)
class Export:
    """A parsed export, each kind in file order, every line with its label."""

    memories: list[Labelled] = field(default_factory=list)
    relations: list[Labelled] = field(default_factory=list)
    logs: list[Labelled] = field(default_factory=list)
    records: list[Labelled] = field(default_factory=list)
    job_states: list[Labelled] = field(default_factory=list)
    schedules: list[Labelled] = field(default_factory=list)

    def kinds(self) -> dict[str, list[Labelled]]:
        return {
            "memory": self.memories,
            "relation": self.relations,
            "log": self.logs,
            "record": self.records,
            "job_state": self.job_states,
            "schedule": self.schedules,
        }

    def namespaces(self) -> list[str]:
        """Every namespace a line of the export belongs to, sorted."""
        names = {
            entry.line.namespace
            for kind, entries in self.kinds().items()
            if kind != "schedule"
            for entry in entries
        }
        return sorted(names)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.kinds().values())


def parse_export(
    objects: Sequence[Any],
    labels: Sequence[str],
    *,
    kinds: Iterable[str] = tuple(LINES),
    other_kinds: str = "",
) -> tuple[Export, list[tuple[str, str]]]:
    """Validate export lines; return the parsed export and (label, problem) for every bad line.

    A line of a kind outside ``kinds`` is a problem (``other_kinds`` says what to do with it).
    """
    allowed = frozenset(kinds)
    export = Export()
    sorted_in = export.kinds()
    problems: list[tuple[str, str]] = []
    for raw, label in zip(objects, labels, strict=True):
        kind = raw.get("kind") if isinstance(raw, Mapping) else None
        if not isinstance(kind, str) or kind not in LINES:
            problems.append((label, f'not an export line ("kind" is one of {", ".join(LINES)})'))
            continue
        if kind not in allowed:
            problems.append((label, f"a {kind} line{other_kinds}"))
            continue
        try:
            line = LINES[kind].model_validate(raw)
        except ValidationError as exc:
            problems.extend((label, text) for text in _problems(exc))
            continue
        line_problems = _line_problems(line)
        problems.extend((label, text) for text in line_problems)
        if not line_problems:
            sorted_in[kind].append(Labelled(label, line))
    problems.extend(_cross_problems(export))
    return export, problems


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = problem_message(error)
        out.append(f"{where}: {message}" if where else message)
    return out


def _line_problems(line: _Line) -> list[str]:
    problems = []
    # PostgreSQL text cannot hold NUL; refuse it everywhere so both backends agree.
    texts = [value for value in line.model_dump().values() if isinstance(value, str)]
    if isinstance(line, MemoryLine):
        texts += line.tags
        if line.content_hash != content_hash(line.content):
            problems.append("content_hash: is not the hash of content")
    if any("\x00" in text for text in texts):
        problems.append("a text field contains a NUL character")
    return problems


def _cross_problems(export: Export) -> list[tuple[str, str]]:
    """What is wrong between lines: an id twice with other content; a relation or a link that
    joins two namespaces."""
    problems: list[tuple[str, str]] = []
    for kind, entries in export.kinds().items():
        seen: dict[object, Labelled] = {}
        for entry in entries:
            key = line_key(entry.line)
            first = seen.setdefault(key, entry)
            if first is not entry and first.line != entry.line:
                problems.append(
                    (entry.label, f"{kind} {key} is also on {first.label}, with other content")
                )
    where = {entry.line.id: entry.line.namespace for entry in export.memories}
    for entry in export.memories:
        line = entry.line
        for name in ("prev_id", "next_id", "replaced_by_id"):
            other = getattr(line, name)
            if other in where and where[other] != line.namespace:
                problems.append(
                    (entry.label, f"{name}: memory {other} is in namespace {where[other]!r}")
                )
    for entry in export.relations:
        line = entry.line
        for end in (line.source_id, line.target_id):
            if end in where and where[end] != line.namespace:
                problems.append(
                    (
                        entry.label,
                        f"relation of namespace {line.namespace!r} joins memory {end} of "
                        f"namespace {where[end]!r}: a relation stays inside one namespace",
                    )
                )
    return problems


def line_key(line: Any) -> object:
    """What identifies a line's row: its id, or (job, namespace), or the job of a schedule."""
    if isinstance(line, JobStateLine):
        return (line.job, line.namespace)
    if isinstance(line, ScheduleLine):
        return line.job
    return line.id


def other_namespace(found: str, target: str) -> str:
    return (
        f"a line of namespace {found!r}, not {target!r}: to restore an export into another "
        "namespace, use `secretary import FILE --namespace NEW`"
    )


def in_order(problems: Iterable[tuple[str, str]], labels: Sequence[str]) -> list[tuple[str, str]]:
    """Problems sorted by the order of their labels (those of no line first), stably."""
    position = {label: index for index, label in enumerate(labels)}
    return sorted(problems, key=lambda problem: position.get(problem[0], -1))
