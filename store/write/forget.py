"""Forgetting: a person's erasure request, carried out everywhere the content lives.

Unlike every other change, a forget removes content for good: the memories and conversation log
lines it names (``store.write.forget_plan`` resolves the selection, with everything that holds
the same content), their relations, every maintenance record's images of them, and any text of
theirs that other records or the jobs' state quote (labels, verdicts, stored plans, a failed
run's message). The vector index drops the memories through the outbox; the lexical index
follows the namespace revision. What remains is the erasure record: ids, content hashes, who
asked and when, never the text.

No job can bring an erased line back. The extractor reads lines past its watermark, and the
erased ones are gone; ids are never reused (migration 0004), so a watermark inside the erased
range stays valid and the next run reads exactly the lines that are left. A plan awaiting
approval that would make memories of an erased line is refused, its changes dropped; a run that
read the lines before the forget cannot apply them after it (``Writer.apply`` raises
LinesForgotten). Items a job quarantined that no longer exist leave its quarantine.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import ColumnElement, Text, and_, cast, delete, func, or_, select, update
from sqlalchemy.orm import Session

from store.db import chunks
from store.kinds import MemoryStatus, RecordStatus
from store.models import (
    ConversationLog,
    IndexOutbox,
    JobState,
    MaintenanceOperation,
    MaintenanceRecord,
    Memory,
    MemoryRelation,
)
from store.write.forget_plan import (
    ForgetPlan,
    ForgetSelection,
    Forgotten,
    LogFilter,
    log_filter,
    plan_forget,
)
from store.write.stale import PENDING, drop_stale
from store.write.unit import UnitOfWork, tombstone

__all__ = [
    "FORGOTTEN",
    "SHINGLE",
    "ForgetPlan",
    "ForgetSelection",
    "Forgotten",
    "LogFilter",
    "Quotes",
    "drop_images",
    "erase",
    "erasure_stats",
    "log_filter",
    "plan_forget",
]

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


def erase(unit: UnitOfWork, plan: ForgetPlan) -> None:
    """Carry the plan out in the unit's transaction (its record is the erasure record)."""
    session, ids = unit.session, plan.ids
    if not ids and not plan.lines:
        return
    if ids:
        _erase_memories(unit, plan)
    for chunk in chunks(plan.logs):
        session.execute(delete(ConversationLog).where(ConversationLog.id.in_(chunk)))
    quotes = Quotes(plan.texts)
    _scrub_records(session, plan, quotes, by=unit.record.id)
    _scrub_jobs(session, plan, quotes)


def _erase_memories(unit: UnitOfWork, plan: ForgetPlan) -> None:
    session, ids = unit.session, plan.ids
    memories = [unit.memory(i) for i in sorted(ids)]
    for memory in memories:
        if memory.status == MemoryStatus.ACTIVE:
            unit.splice_out(memory, record_self=False)
    for chunk in chunks(ids):
        for other in session.scalars(select(Memory).where(Memory.replaced_by_id.in_(chunk))):
            if other.id not in ids:
                unit.touch(other)
                other.replaced_by_id = None
    for chunk in chunks(plan.relations):
        session.execute(delete(MemoryRelation).where(MemoryRelation.id.in_(chunk)))
    for memory in memories:  # links among the forgotten rows would depend on the delete order
        memory.prev_id = memory.next_id = memory.replaced_by_id = None
    session.flush()
    for chunk in chunks(ids):
        session.execute(delete(IndexOutbox).where(IndexOutbox.memory_id.in_(chunk)))
    for memory in memories:
        unit.forget_row(memory)
    session.flush()


# -- scrubbing the records ---------------------------------------------------------------------


def _scrub_records(session: Session, plan: ForgetPlan, quotes: Quotes, *, by: int) -> None:
    """Remove the forgotten content from every record of the namespace; refuse the pending
    plans that name a forgotten memory or would make memories of a forgotten line."""
    lines, memories = set(plan.logs), plan.ids
    records = session.scalars(
        select(MaintenanceRecord).where(MaintenanceRecord.namespace == plan.namespace)
    ).all()
    why = f"memories or conversation lines it named were forgotten (record #{by})"
    for record in records:
        stats = dict(record.stats or {})
        if record.status in PENDING and record.id != by:
            refused = drop_stale(stats, memories=memories, lines=lines, why=why)
            if refused is not None:
                stats = refused
                record.status = RecordStatus.REFUSED.value
        record.stats = quotes.scrub(stats)
        if record.error:
            record.error = quotes.scrub(record.error)
    _scrub_operations(session, plan, quotes)


def _scrub_jobs(session: Session, plan: ForgetPlan, quotes: Quotes) -> None:
    """Remove the forgotten content from the jobs' state and health, and from their
    quarantines the items that are gone.

    A job's ids are memory ids or log ids, and only the job knows which: an id leaves the lists
    only when neither a memory nor a line holds it any more (ids are never reused).
    """
    erased = plan.ids | set(plan.logs)
    held: set[int] = set()
    for chunk in chunks(erased):
        for table in (Memory, ConversationLog):
            held.update(session.scalars(select(table.id).where(table.id.in_(chunk))))
    gone = erased - held
    rows = session.scalars(select(JobState).where(JobState.namespace == plan.namespace))
    for row in rows:
        state, health = quotes.scrub(row.state or {}), quotes.scrub(row.health or {})
        health = _without(health, gone)
        if state != (row.state or {}):
            row.state = state
        if health != (row.health or {}):
            row.health = health


def _without(health: dict[str, Any], gone: set[int]) -> dict[str, Any]:
    """A job's health without the quarantined and failing items in ``gone``."""
    out = dict(health)
    quarantined = out.get("quarantined")
    if isinstance(quarantined, list):
        left = [i for i in quarantined if i not in gone]
        if left:
            out["quarantined"] = left
        else:
            out.pop("quarantined")
    failing = out.get("failing")
    if isinstance(failing, Mapping) and isinstance(failing.get("ids"), list):
        left = [i for i in failing["ids"] if i not in gone]
        if left:
            out["failing"] = {**failing, "ids": left}
        else:
            out.pop("failing")
    return out


def _scrub_operations(session: Session, plan: ForgetPlan, quotes: Quotes) -> None:
    """Tombstone the images of the forgotten rows; replace what quotes them in the others."""
    ids, relations, lines = plan.ids, set(plan.relations), set(plan.logs)

    def scrubbed(kind: str, target_id: int, before: JsonText, after: JsonText) -> NewImages:
        if (
            (kind == "memory" and target_id in ids)
            or (kind == "log" and target_id in lines)
            or (
                kind == "relation" and (target_id in relations or _names_an_end(ids, before, after))
            )
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
