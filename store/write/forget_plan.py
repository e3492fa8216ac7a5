"""What a forget erases: the selection resolved, with everything that holds the same content.

A selection names memories (by id, external id, filter, or all of the namespace's) and
conversation log lines (by session, time, idempotency key or content; with ``logs``, also the
lines the memories came from; with ``everything`` and ``logs``, every line of the namespace).
What holds the same content goes too:

- memories merged into a forgotten one (an exact duplicate, a fragment), the one a forgotten
  memory was merged into, and those derived from it (a summary, a trait);
- memories extracted from a forgotten line (their ``source_log_ids`` cite it), and what holds
  their content in turn. The other lines such a memory cites stay: the content it shares with
  them is not what was asked to go.

A memory that superseded a forgotten one holds newer, different facts and stays. ``plan_forget``
lists all of it with the reason, for a dry run, before anything goes (``store.write.forget``
erases it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, cast, or_, select
from sqlalchemy.orm import Session

from store.clock import ensure_utc, parse_timestamp
from store.db import CHUNK, chunks
from store.errors import NotFound, ValidationFailed
from store.kinds import MemoryStatus, RelationType
from store.models import ConversationLog, MaintenanceOperation, Memory, MemoryRelation
from store.requests import SearchFilters, lone_surrogate
from store.text import content_hash

# -- the selection ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LogFilter:
    """Conversation log lines that meet every field given; a field of several values is met by
    any one of them. Empty fields restrict nothing.

    ``match`` is a substring of the line's text, compared without regard to case (Unicode case
    folding: "STRASSE" finds "Straße"), so that an erasure does not miss a capitalised name.
    """

    sessions: tuple[str, ...] = ()  # session_id is one of these
    since: datetime | None = None  # timestamp >= since
    until: datetime | None = None  # timestamp < until
    keys: tuple[str, ...] = ()  # idempotency_key is one of these (each must be stored)
    match: tuple[str, ...] = ()  # the text holds one of these, in any case

    @property
    def empty(self) -> bool:
        return self == LogFilter()

    def problems(self) -> list[tuple[str, str]]:
        """What names nothing sensible: ``since`` after ``until``, a blank value, a value that
        is not Unicode text."""
        found: list[tuple[str, str]] = []
        if self.since is not None and self.until is not None and self.since > self.until:
            found.append(("since", "is after until"))
        for name, values in (("session", self.sessions), ("key", self.keys), ("match", self.match)):
            for index, value in enumerate(values):
                surrogate = lone_surrogate(value)
                if not value.strip():
                    found.append((f"{name}.{index}", "is blank"))
                elif surrogate is not None:
                    found.append((f"{name}.{index}", surrogate))
        return found

    def holds(self, text: str) -> bool:
        """Tell whether a line's text meets ``match`` (any text does when it is empty)."""
        folded = text.casefold()
        return not self.match or any(needle.casefold() in folded for needle in self.match)


def log_filter(
    *,
    sessions: Sequence[str] = (),
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    keys: Sequence[str] = (),
    match: Sequence[str] = (),
) -> LogFilter:
    """Build a log filter from a front end's raw parameters (times as ISO-8601 text or aware
    datetimes). Raise ValidationFailed naming each bad one."""
    problems: list[tuple[str, str]] = []
    built = LogFilter(
        sessions=tuple(sessions),
        since=_moment("since", since, problems),
        until=_moment("until", until, problems),
        keys=tuple(keys),
        match=tuple(match),
    )
    problems += built.problems()
    if problems:
        raise ValidationFailed(problems)
    return built


def _moment(
    name: str, value: datetime | str | None, problems: list[tuple[str, str]]
) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value) if isinstance(value, str) else ensure_utc(value)
    except ValueError:
        problems.append((name, f"not an ISO-8601 time: {value!r}"))
        return None


@dataclass(frozen=True, kw_only=True)
class ForgetSelection:
    """What to forget: memories by id, by external id, by filter, or the whole namespace's;
    conversation log lines by ``log_filter``."""

    ids: tuple[int, ...] = ()
    external_ids: tuple[str, ...] = ()
    filters: SearchFilters | None = None
    everything: bool = False
    # Also the conversation log lines the memories were extracted from; with ``everything``,
    # every line of the namespace.
    logs: bool = False
    log_filter: LogFilter | None = None  # lines (and what was extracted from them)

    @property
    def names_lines(self) -> bool:
        return self.log_filter is not None and not self.log_filter.empty

    @property
    def empty(self) -> bool:
        """Names nothing (a filter that restricts nothing names nothing either: forgetting a
        whole namespace takes ``everything``). Lines alone are something."""
        filtered = self.filters is not None and not self.filters.empty
        return not (
            self.ids or self.external_ids or filtered or self.everything or self.names_lines
        )


# -- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Forgotten:
    """One memory (or log line) a forget erases, and why it is part of it."""

    id: int
    content_hash: str
    why: str  # "asked", "merged into #12", "derived from #7", "extracted from line #3", ...


@dataclass(frozen=True, kw_only=True)
class ForgetPlan:
    namespace: str
    memories: tuple[Forgotten, ...]
    relations: tuple[int, ...]
    lines: tuple[Forgotten, ...] = ()  # conversation log lines
    texts: tuple[str, ...] = field(repr=False)  # the content to scrub from other places

    @property
    def ids(self) -> set[int]:
        return {m.id for m in self.memories}

    @property
    def logs(self) -> tuple[int, ...]:
        return tuple(line.id for line in self.lines)

    def as_json(self) -> dict[str, Any]:
        """Ids, hashes and reasons; never the text (what the erasure record says)."""
        return {
            "namespace": self.namespace,
            "memories": [
                {"id": m.id, "content_hash": m.content_hash, "why": m.why} for m in self.memories
            ],
            "relations": list(self.relations),
            "logs": list(self.logs),
            "log_hashes": [line.content_hash for line in self.lines],
        }


def plan_forget(session: Session, namespace: str, selection: ForgetSelection) -> ForgetPlan:
    """Resolve the selection and everything that holds the same content. Raise NotFound for an
    id, external id or idempotency key the namespace does not hold."""
    found = _Memories(session, namespace)
    found.add([(m, "asked") for m in _selected(session, namespace, selection)])
    lines = {i: (text, "asked") for i, text in _selected_lines(session, namespace, selection)}
    if selection.logs:
        for line_id, text, memory_id in _source_logs(session, namespace, found.rows.values()):
            lines.setdefault(line_id, (text, f"#{memory_id} came from it"))
    if lines and not selection.everything:
        found.add(_citing(session, namespace, set(lines), found.rows))
    ids = sorted(found.rows)
    relations: set[int] = set()
    for chunk in chunks(ids):
        relations.update(
            session.scalars(
                select(MemoryRelation.id).where(
                    or_(MemoryRelation.source_id.in_(chunk), MemoryRelation.target_id.in_(chunk))
                )
            )
        )
    texts = [found.rows[i].content for i in ids] + [text for text, _ in lines.values()]
    return ForgetPlan(
        namespace=namespace,
        memories=tuple(
            Forgotten(id=i, content_hash=found.rows[i].content_hash, why=found.why[i]) for i in ids
        ),
        relations=tuple(sorted(relations)),
        lines=tuple(
            Forgotten(id=i, content_hash=content_hash(text), why=why)
            for i, (text, why) in sorted(lines.items())
        ),
        texts=tuple(texts + _earlier_texts(session, sorted(lines))),
    )


class _Memories:
    """The memories found so far with why, closed over what holds the same content."""

    def __init__(self, session: Session, namespace: str) -> None:
        self.session, self.namespace = session, namespace
        self.rows: dict[int, Memory] = {}
        self.why: dict[int, str] = {}

    def add(self, found: Iterable[tuple[Memory, str]]) -> None:
        frontier = self._new(found)
        while frontier:
            frontier = self._new(
                _holding_the_same(self.session, self.namespace, frontier, self.rows)
            )

    def _new(self, found: Iterable[tuple[Memory, str]]) -> list[int]:
        fresh = []
        for memory, reason in found:
            if memory.id not in self.rows:
                self.rows[memory.id] = memory
                self.why[memory.id] = reason
                fresh.append(memory.id)
        return fresh


def _selected(session: Session, namespace: str, selection: ForgetSelection) -> list[Memory]:
    in_namespace = select(Memory).where(Memory.namespace == namespace)
    if selection.everything:
        return list(session.scalars(in_namespace))
    found: dict[int, Memory] = {}
    for memory_id in selection.ids:
        memory = session.get(Memory, memory_id)
        if memory is None or memory.namespace != namespace:
            raise NotFound("memory", memory_id)
        found[memory.id] = memory
    for external_id in selection.external_ids:
        memory = session.scalars(in_namespace.where(Memory.external_id == external_id)).first()
        if memory is None:
            raise NotFound("memory with external id", repr(external_id))
        found[memory.id] = memory
    if selection.filters is not None and not selection.filters.empty:
        filters = selection.filters
        for memory in session.scalars(in_namespace):
            view = _FilterView(memory)
            if filters.matches(view):
                found[memory.id] = memory
    return list(found.values())


@dataclass(frozen=True)
class _FilterView:
    """A memory row as ``SearchFilters.matches`` reads it."""

    row: Memory

    @property
    def type(self) -> str:
        return self.row.type

    @property
    def tags(self) -> Sequence[str]:
        return tuple(self.row.tags or ())

    @property
    def event_time(self) -> Any:
        return self.row.event_time

    @property
    def metadata(self) -> Mapping[str, Any]:
        return dict(self.row.metadata_ or {})


def _holding_the_same(
    session: Session, namespace: str, ids: Sequence[int], known: Mapping[int, Memory]
) -> list[tuple[Memory, str]]:
    """The memories that hold content of these: merged into them, theirs merged into, derived."""
    out: list[tuple[Memory, str]] = []
    for memory_id in ids:
        memory = known[memory_id]
        if memory.status == MemoryStatus.MERGED and memory.replaced_by_id is not None:
            into = session.get(Memory, memory.replaced_by_id)
            if into is not None:
                out.append((into, f"#{memory_id} was merged into it"))
    for chunk in chunks(ids):
        merged_in = session.scalars(
            select(Memory).where(
                Memory.namespace == namespace,
                Memory.replaced_by_id.in_(chunk),
                Memory.status == MemoryStatus.MERGED.value,
            )
        )
        out += [(m, f"merged into #{m.replaced_by_id}") for m in merged_in]
        derived = session.execute(
            select(MemoryRelation.source_id, MemoryRelation.target_id).where(
                MemoryRelation.namespace == namespace,
                MemoryRelation.type == RelationType.DERIVED_FROM.value,
                MemoryRelation.target_id.in_(chunk),
            )
        ).all()
        for source, target in derived:
            derived_memory = session.get(Memory, source)
            if derived_memory is not None:
                out.append((derived_memory, f"derived from #{target}"))
    return out


# -- conversation lines ---------------------------------------------------------------------------


def _cited(metadata: Mapping[str, Any] | None) -> list[int]:
    """The log line ids a memory's metadata says it was extracted from."""
    cited = (metadata or {}).get("source_log_ids") or []
    return [i for i in cited if isinstance(i, int)] if isinstance(cited, list) else []


def _selected_lines(
    session: Session, namespace: str, selection: ForgetSelection
) -> list[tuple[int, str]]:
    """Return (id, text) of the lines the selection names by itself, by id."""
    log = ConversationLog
    query = select(log.id, log.content).where(log.namespace == namespace).order_by(log.id)
    if selection.everything and selection.logs:
        return [(i, text) for i, text in session.execute(query)]
    wanted = selection.log_filter
    if wanted is None or wanted.empty:
        return []
    if wanted.sessions:
        query = query.where(log.session_id.in_(sorted(set(wanted.sessions))))
    if wanted.since is not None:
        query = query.where(log.timestamp >= wanted.since)
    if wanted.until is not None:
        query = query.where(log.timestamp < wanted.until)
    if wanted.keys:
        rows = _by_keys(session, namespace, query, wanted.keys)
    else:
        rows = [(i, text) for i, text in session.execute(query.execution_options(yield_per=CHUNK))]
    return [(i, text) for i, text in rows if wanted.holds(text)]


def _by_keys(
    session: Session, namespace: str, query: Select[int, str], keys: Iterable[str]
) -> list[tuple[int, str]]:
    """Return the rows of ``query`` with these idempotency keys, by id. Raise NotFound for a
    key the namespace does not hold."""
    log = ConversationLog
    wanted = sorted(set(keys))
    rows: list[tuple[int, str]] = []
    for start in range(0, len(wanted), CHUNK):
        some = wanted[start : start + CHUNK]
        held = set(
            session.scalars(
                select(log.idempotency_key).where(
                    log.namespace == namespace, log.idempotency_key.in_(some)
                )
            )
        )
        missing = [key for key in some if key not in held]
        if missing:
            raise NotFound("log line with idempotency key", repr(missing[0]))
        found = session.execute(query.where(log.idempotency_key.in_(some)))
        rows += [(i, text) for i, text in found]
    return sorted(rows)


def _source_logs(
    session: Session, namespace: str, memories: Iterable[Memory]
) -> list[tuple[int, str, int]]:
    """Return (id, text, memory id) of the namespace's lines the memories came from."""
    wanted: dict[int, int] = {}
    for memory in sorted(memories, key=lambda m: m.id):
        for line in _cited(memory.metadata_):
            wanted.setdefault(line, memory.id)
    found: list[tuple[int, str, int]] = []
    for chunk in chunks(wanted):
        rows = session.execute(
            select(ConversationLog.id, ConversationLog.content).where(
                ConversationLog.namespace == namespace, ConversationLog.id.in_(chunk)
            )
        )
        found += [(i, text, wanted[i]) for i, text in rows]
    return found


def _citing(
    session: Session, namespace: str, lines: set[int], known: Mapping[int, Memory]
) -> list[tuple[Memory, str]]:
    """The memories extracted from any of ``lines`` (besides ``known``), with the line."""
    extracted = cast(Memory.metadata_, Text).contains("source_log_ids", autoescape=True)
    query = select(Memory.id, Memory.metadata_).where(Memory.namespace == namespace, extracted)
    first: dict[int, int] = {}
    for memory_id, metadata in session.execute(query.execution_options(yield_per=CHUNK)):
        cited = sorted(lines.intersection(_cited(metadata)))
        if cited and memory_id not in known:
            first[memory_id] = cited[0]
    out: list[tuple[Memory, str]] = []
    for chunk in chunks(first):
        for memory in session.scalars(select(Memory).where(Memory.id.in_(chunk))):
            out.append((memory, f"extracted from line #{first[memory.id]}"))
    return sorted(out, key=lambda found: found[0].id)


def _earlier_texts(session: Session, line_ids: Sequence[int]) -> list[str]:
    """What the lines said before an ingest updated them, as the records' images keep it."""
    op = MaintenanceOperation
    texts: list[str] = []
    for chunk in chunks(line_ids):
        images = session.execute(
            select(op.before, op.after).where(op.target_kind == "log", op.target_id.in_(chunk))
        )
        for before, after in images:
            texts += [
                image["content"]
                for image in (before, after)
                if image is not None and isinstance(image.get("content"), str)
            ]
    return texts
