"""Forgetting: a person's erasure request, carried out everywhere the content lives.

Unlike every other change, a forget removes content for good: the memories (and, if asked, the
conversation log lines they came from), their relations, every maintenance record's images of
them, and any text of theirs that other records quote (labels, verdicts, stored plans). The
vector index drops them through the outbox; the lexical index follows the namespace revision.
What remains is the erasure record: ids, content hashes, who asked and when, never the text.

Memories that hold the same content go too: those merged into a forgotten one (an exact
duplicate, a fragment), the one a forgotten memory was merged into, and those derived from it
(a summary, a trait). A memory that superseded a forgotten one holds newer, different facts and
stays. ``plan_forget`` lists all of it with the reason, for a dry run, before anything goes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Text, and_, cast, delete, func, or_, select, update
from sqlalchemy.orm import Session

from store.errors import NotFound
from store.kinds import MemoryStatus, RelationType
from store.models import (
    ConversationLog,
    IndexOutbox,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
)
from store.requests import SearchFilters
from store.write.unit import UnitOfWork, tombstone

# A run of this many characters of forgotten text, found in any other stored string, marks
# that string as quoting it (a label cut at 60 characters, a verdict's reason, a stored plan).
SHINGLE = 24
FORGOTTEN = "[forgotten]"
# Stored JSON text that may quote is found by pieces of half a shingle (a run of SHINGLE
# characters always holds one of those that start at multiples of PIECE), then by the runs
# themselves. Past MAX_PIECES of either (a forget of hundreds of memories, a very long text),
# every image is decoded and searched instead.
PIECE = SHINGLE // 2
MAX_PIECES = 20_000
# Images of a namespace's operations read per query when a forget or a purge rewrites them.
REWRITE_PAGE = 5000


@dataclass(frozen=True, kw_only=True)
class ForgetSelection:
    """What to forget: memories by id, by external id, by filter, or the whole namespace."""

    ids: tuple[int, ...] = ()
    external_ids: tuple[str, ...] = ()
    filters: SearchFilters | None = None
    everything: bool = False
    logs: bool = False  # also the conversation log lines the memories were extracted from

    @property
    def empty(self) -> bool:
        """Names nothing (a filter that restricts nothing names nothing either: forgetting a
        whole namespace takes ``everything``)."""
        filtered = self.filters is not None and not self.filters.empty
        return not (self.ids or self.external_ids or filtered or self.everything)


@dataclass(frozen=True, kw_only=True)
class Forgotten:
    """One memory a forget erases, and why it is part of it."""

    id: int
    content_hash: str
    why: str  # "asked", "merged into #12", "derived from #7", ...


@dataclass(frozen=True, kw_only=True)
class ForgetPlan:
    namespace: str
    memories: tuple[Forgotten, ...]
    relations: tuple[int, ...]
    logs: tuple[int, ...]
    texts: tuple[str, ...] = field(repr=False)  # the content to scrub from other places

    @property
    def ids(self) -> set[int]:
        return {m.id for m in self.memories}

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "memories": [
                {"id": m.id, "content_hash": m.content_hash, "why": m.why} for m in self.memories
            ],
            "relations": list(self.relations),
            "logs": list(self.logs),
        }


def plan_forget(session: Session, namespace: str, selection: ForgetSelection) -> ForgetPlan:
    """Resolve the selection and everything that holds the same content. Raise NotFound for an
    id or external id the namespace does not hold."""
    rows = {m.id: m for m in _selected(session, namespace, selection)}
    why = dict.fromkeys(rows, "asked")
    frontier = list(rows)
    while frontier:
        found = _holding_the_same(session, namespace, frontier, rows)
        frontier = []
        for memory, reason in found:
            if memory.id not in rows:
                rows[memory.id] = memory
                why[memory.id] = reason
                frontier.append(memory.id)
    ids = sorted(rows)
    relations = session.scalars(
        select(MemoryRelation.id).where(
            or_(MemoryRelation.source_id.in_(ids), MemoryRelation.target_id.in_(ids))
        )
    ).all()
    logs = _source_logs(session, namespace, rows.values()) if selection.logs else []
    texts = [rows[i].content for i in ids]
    if logs:
        texts += session.scalars(
            select(ConversationLog.content).where(ConversationLog.id.in_(logs))
        ).all()
    return ForgetPlan(
        namespace=namespace,
        memories=tuple(Forgotten(id=i, content_hash=rows[i].content_hash, why=why[i]) for i in ids),
        relations=tuple(sorted(relations)),
        logs=tuple(sorted(logs)),
        texts=tuple(texts),
    )


def erase(unit: UnitOfWork, plan: ForgetPlan) -> None:
    """Carry the plan out in the unit's transaction (its record is the erasure record)."""
    session, ids = unit.session, plan.ids
    if not ids and not plan.logs:
        return
    memories = [unit.memory(i) for i in sorted(ids)]
    for memory in memories:
        if memory.status == MemoryStatus.ACTIVE:
            unit.splice_out(memory, record_self=False)
    for other in session.scalars(
        select(Memory).where(Memory.replaced_by_id.in_(ids), Memory.id.not_in(ids))
    ):
        unit.touch(other)
        other.replaced_by_id = None
    session.execute(delete(MemoryRelation).where(MemoryRelation.id.in_(plan.relations)))
    for memory in memories:  # links among the forgotten rows would depend on the delete order
        memory.prev_id = memory.next_id = memory.replaced_by_id = None
    session.flush()
    session.execute(delete(IndexOutbox).where(IndexOutbox.memory_id.in_(ids)))
    for memory in memories:
        unit.forget_row(memory)
    session.flush()
    if plan.logs:
        session.execute(delete(ConversationLog).where(ConversationLog.id.in_(plan.logs)))
    _scrub_records(session, plan)


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
    merged_in = session.scalars(
        select(Memory).where(
            Memory.namespace == namespace,
            Memory.replaced_by_id.in_(ids),
            Memory.status == MemoryStatus.MERGED.value,
        )
    )
    out += [(m, f"merged into #{m.replaced_by_id}") for m in merged_in]
    derived = session.execute(
        select(MemoryRelation.source_id, MemoryRelation.target_id).where(
            MemoryRelation.namespace == namespace,
            MemoryRelation.type == RelationType.DERIVED_FROM.value,
            MemoryRelation.target_id.in_(ids),
        )
    ).all()
    for source, target in derived:
        derived_memory = session.get(Memory, source)
        if derived_memory is not None:
            out.append((derived_memory, f"derived from #{target}"))
    return out


def _source_logs(session: Session, namespace: str, memories: Iterable[Memory]) -> list[int]:
    wanted = {
        int(i)
        for m in memories
        for i in (m.metadata_ or {}).get("source_log_ids", [])
        if isinstance(i, int)
    }
    if not wanted:
        return []
    return list(
        session.scalars(
            select(ConversationLog.id).where(
                ConversationLog.namespace == namespace, ConversationLog.id.in_(sorted(wanted))
            )
        )
    )


# -- scrubbing the records ---------------------------------------------------------------------


def _scrub_records(session: Session, plan: ForgetPlan) -> None:
    """Remove the forgotten content from every record of the namespace."""
    quotes = Quotes(plan.texts)
    records = session.scalars(
        select(MaintenanceRecord).where(MaintenanceRecord.namespace == plan.namespace)
    ).all()
    for record in records:
        record.stats = quotes.scrub(record.stats or {})
        if record.error:
            record.error = quotes.scrub(record.error)
    _scrub_operations(session, plan, quotes)


def _scrub_operations(session: Session, plan: ForgetPlan, quotes: Quotes) -> None:
    """Tombstone the images of the forgotten rows; replace what quotes them in the others."""
    ids, relations = plan.ids, set(plan.relations)

    def scrubbed(kind: str, target_id: int, before: JsonText, after: JsonText) -> NewImages:
        if (kind == "memory" and target_id in ids) or (
            kind == "relation" and (target_id in relations or _names_an_end(ids, before, after))
        ):
            return _tombstones(target_id, before, after)
        if not quotes.may_quote(before, after):
            return None
        images = _image(before), _image(after)
        return _changed(images, (quotes.scrub(images[0]), quotes.scrub(images[1])))

    _rewrite_images(session, plan.namespace, scrubbed)


def drop_images(session: Session, namespace: str, memory_ids: set[int]) -> None:
    """Keep only tombstones of these memories (and their relations) in every record: what
    retention purges leaves no content behind in the records that once changed it."""
    if not memory_ids:
        return
    op = MaintenanceOperation

    def dropped(kind: str, target_id: int, before: JsonText, after: JsonText) -> NewImages:
        if kind == "relation" and not _names_an_end(memory_ids, before, after):
            return None
        return _tombstones(target_id, before, after)

    # A relation's image names its ends: only one whose text holds an id's digits can.
    texts = (cast(op.before, Text), cast(op.after, Text))
    naming = [text.contains(str(memory_id)) for memory_id in memory_ids for text in texts]
    where = or_(
        and_(op.target_kind == "memory", op.target_id.in_(sorted(memory_ids))),
        and_(op.target_kind == "relation", or_(*naming)),
    )
    _rewrite_images(session, namespace, dropped, where=where)


# -- rewriting images ----------------------------------------------------------------------------

JsonText = str | None  # an image as the database holds it
Images = tuple[dict[str, Any] | None, dict[str, Any] | None]  # (before, after), decoded
NewImages = Images | None  # None: keep them


def _rewrite_images(
    session: Session,
    namespace: str,
    rewrite: Callable[[str, int, JsonText, JsonText], NewImages],
    *,
    where: ColumnElement[bool] | None = None,
) -> None:
    """Write back the images of the namespace's operations (``where`` they match) that
    ``rewrite(target_kind, target_id, before, after)`` changes (it returns None for the rest).

    A namespace of a million memories holds millions of images (each ingested memory leaves
    one), so they are read a page at a time, as JSON text: ``rewrite`` decodes only those it
    must look into."""
    op = MaintenanceOperation
    columns = (op.id, op.target_kind, op.target_id, cast(op.before, Text), cast(op.after, Text))
    query = select(*columns) if where is None else select(*columns).where(where)
    for page in _pages(session, namespace):
        changes = []
        for op_id, kind, target_id, before_text, after_text in session.execute(query.where(page)):
            images = rewrite(kind, target_id, before_text, after_text)
            if images is not None:
                changes.append({"id": op_id, "before": images[0], "after": images[1]})
        if changes:
            session.execute(update(op), changes)  # by primary key


def _pages(session: Session, namespace: str) -> Iterator[ColumnElement[bool]]:
    """Yield conditions that together select every operation of the namespace once, each at
    most REWRITE_PAGE: those of a run of whole records, or a window of a big record's seqs.

    Each is read by the (record, seq) index alone. One query paged over the whole namespace,
    "ordered by id after the last one", made SQLite gather and sort all of the namespace's
    operations for every page: ~34 s to read a million of them (a forget at 1M memories took
    44 s, and takes 23 s so)."""
    op = MaintenanceOperation
    records = session.execute(
        select(op.record_id, func.count(), func.min(op.seq), func.max(op.seq))
        .join(MaintenanceRecord, MaintenanceRecord.id == op.record_id)
        .where(MaintenanceRecord.namespace == namespace)
        .group_by(op.record_id)
        .order_by(op.record_id)
    ).all()
    run: list[int] = []
    held = 0
    for record_id, size, first, last in records:
        if run and held + size > REWRITE_PAGE:
            yield op.record_id.in_(run)
            run, held = [], 0
        if size <= REWRITE_PAGE:
            run.append(record_id)
            held += size
            continue
        for start in range(first, last + 1, REWRITE_PAGE):  # seqs are unique in a record
            yield and_(op.record_id == record_id, op.seq.between(start, start + REWRITE_PAGE - 1))
    if run:
        yield op.record_id.in_(run)


def _image(text: JsonText) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def _tombstones(target_id: int, before: JsonText, after: JsonText) -> NewImages:
    images = _image(before), _image(after)
    return _changed(images, (tombstone(images[0], target_id), tombstone(images[1], target_id)))


def _changed(old: Images, new: Images) -> NewImages:
    """The new images, or None if they are the old ones (a tombstone stays as it is)."""
    return None if new == old else new


def _names_an_end(ids: set[int], before: JsonText, after: JsonText) -> bool:
    """Tell whether a relation's image has one of ``ids`` at an end; decoded only if its text
    holds one's digits (or there are too many ids to look for)."""
    if len(ids) <= MAX_PIECES and not any(
        text is not None and str(memory_id) in text for text in (before, after) for memory_id in ids
    ):
        return False
    return _touches(_image(after) or _image(before), ids)


def _touches(image: Mapping[str, Any] | None, ids: set[int]) -> bool:
    """Tell whether a relation's image has a forgotten memory at one of its ends."""
    image = image or {}
    return image.get("source_id") in ids or image.get("target_id") in ids


class Quotes:
    """Finds stored strings that quote forgotten text, by runs of SHINGLE characters."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._whole = {t for t in texts if t}
        self._runs = {
            text[i : i + SHINGLE]
            for text in self._whole
            if len(text) >= SHINGLE
            for i in range(len(text) - SHINGLE + 1)
        }
        self._pieces = _escaped(_pieces(self._whole))
        short = (text for text in self._whole if len(text) < SHINGLE)
        self._escaped_runs = _escaped(itertools.chain(self._runs, short))

    def quotes(self, value: str) -> bool:
        if any(text in value for text in self._whole):
            return True
        return any(value[i : i + SHINGLE] in self._runs for i in range(len(value) - SHINGLE + 1))

    def may_quote(self, *json_texts: str | None) -> bool:
        """Tell whether JSON texts may hold a string that `quotes` (False: surely none does).

        Such a string holds a run (or a whole text shorter than a run), so the JSON text holds
        it as JSON escapes it, character by character. The runs are many; the pieces, few,
        rule out most texts first."""
        texts = [text for text in json_texts if text is not None]
        if self._pieces is None or self._escaped_runs is None:
            return bool(texts)
        return any(
            any(piece in text for piece in self._pieces)
            and any(run in text for run in self._escaped_runs)
            for text in texts
        )

    def scrub(self, value: Any) -> Any:
        """Return the value (JSON data or a string) with every quoting string replaced."""
        if isinstance(value, str):
            return FORGOTTEN if self.quotes(value) else value
        if isinstance(value, Mapping):
            return {key: self.scrub(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(item) for item in value]
        return value


def _pieces(texts: Iterable[str]) -> list[str]:
    """Return what a string quoting one of ``texts`` holds one of: each text shorter than a
    shingle, and the PIECE-long pieces of the others that start at multiples of PIECE (a run
    text[i : i + SHINGLE] holds the one at the first multiple of PIECE from i)."""
    pieces: list[str] = []
    for text in texts:
        if len(text) < SHINGLE:
            pieces.append(text)
        else:
            pieces += [text[i : i + PIECE] for i in range(0, len(text) - PIECE + 1, PIECE)]
    return pieces


def _escaped(strings: Iterable[str]) -> tuple[str, ...] | None:
    """Return the strings as JSON writes them, with and without ASCII escapes, longest first;
    None if there are more than MAX_PIECES (a forget of many memories: decode everything)."""
    forms: set[str] = set()
    for string in strings:
        forms.add(json.dumps(string)[1:-1])
        forms.add(json.dumps(string, ensure_ascii=False)[1:-1])
        if len(forms) > MAX_PIECES:
            return None
    return tuple(sorted(forms, key=len, reverse=True))


def erasure_stats(plan: ForgetPlan, *, by: str | None) -> dict[str, Any]:
    """What the erasure record says: ids, hashes, why, who; never the text."""
    return {**plan.as_json(), "by": by, "irreversible": True}


def dumps(plan: ForgetPlan) -> str:
    return json.dumps(plan.as_json(), sort_keys=True)
