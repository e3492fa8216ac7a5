"""A record's change, told readably: `secretary records diff` and GET /v1/records/{id}/diff.

``record_diff`` is a pure function over a record's views and a lookup of memory texts; the CLI
and the API both call it. Texts come from the record's own images where it has them (the text
after the change, or before it for a removed memory); the lookup supplies the rest (the other
end of a new relation, the memory a duplicate was merged into), as the memories read now.

Entries, in this order: merges ("#12, #19 -> #31: <summary>"), supersedes, archives,
reactivations, new memories (a preference with its ``derived_from`` evidence is a trait),
content updates (text before -> after, other fields below), deletions (retention's purge; an
undo's removal of what its record created), relations created, removed or changed (with both
ends' text), conversation log lines an ingest updated (text before -> after, other fields
below), and one line for the memories whose timeline links moved (a neighbour arrived or left).
An undo record is told the same way, with a header naming the record it undid.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.changes import count_kinds, image_kind
from store.kinds import RelationType
from store.views import OperationView, RecordView

# Given ids, return id -> content for those that exist (any status) in the record's namespace.
TextLookup = Callable[[Collection[int]], Mapping[int, str]]

SHOWN_CHARS = 120  # a text longer than this is cut in a line; the JSON keeps it whole
NOT_KEPT = "(text not kept: purged or forgotten)"
# Fields of a memory an update line mentions besides its content (links and statistics not).
_FIELDS = ("type", "tags", "importance", "event_time", "metadata", "pinned", "session_id")
# Fields of a conversation log line its entry mentions besides its text.
_LINE_FIELDS = ("session_id", "role", "timestamp", "pair_id")
_DERIVED_FROM = RelationType.DERIVED_FROM.value
_TRAIT_TYPE = "preference"


@dataclass(frozen=True, kw_only=True)
class DiffEntry:
    """One thing a record did: a line to read, the memories it names, and the full values."""

    kind: str
    line: str
    ids: tuple[int, ...]
    details: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RecordDiff:
    record: RecordView
    header: tuple[str, ...]
    entries: tuple[DiffEntry, ...]
    changes: Mapping[str, int]  # by kind, as `records list` counts them

    def lines(self) -> list[str]:
        """The whole account as text lines (entries' details indented)."""
        lines = list(self.header)
        for entry in self.entries:
            lines.append(f"  {entry.line}")
            lines.extend(f"      {detail}" for detail in entry.details)
        if not self.entries:
            lines.append("  no changes")
        return lines


def needed_ids(operations: Iterable[OperationView]) -> set[int]:
    """The memory ids the diff names whose text the operations do not image."""
    imaged = {op.target_id for op in operations if op.target_kind == "memory"}
    wanted: set[int] = set()
    for op in operations:
        for image in (op.before, op.after):
            if image is None:
                continue
            if op.target_kind == "relation":
                wanted.update(int(image[end]) for end in ("source_id", "target_id"))
            elif image.get("replaced_by_id") is not None:
                wanted.add(int(image["replaced_by_id"]))
    return wanted - imaged


def record_diff(
    record: RecordView, operations: Sequence[OperationView], lookup: TextLookup
) -> RecordDiff:
    """Given a record, its operations and a text lookup, return the readable account."""
    ops = sorted(operations, key=lambda op: op.seq)
    wanted = needed_ids(ops)
    texts = _Texts(ops, lookup(wanted) if wanted else {})
    builder = _Builder(record, ops, texts)
    return RecordDiff(
        record=record,
        header=_header(record),
        entries=tuple(builder.build()),
        changes=count_kinds(image_kind(op.op, op.before, op.after) for op in ops),
    )


def diff_json(diff: RecordDiff) -> dict[str, Any]:
    record = diff.record
    return {
        "record": {
            "id": record.id,
            "job": record.job,
            "namespace": record.namespace,
            "status": record.status,
            "started_at": record.started_at.isoformat(),
            "undoes_id": record.undoes_id,
            "undone_by_id": record.undone_by_id,
        },
        "changes_by_kind": dict(diff.changes),
        "entries": [
            {
                "kind": entry.kind,
                "line": entry.line,
                "ids": list(entry.ids),
                "details": list(entry.details),
                **entry.data,
            }
            for entry in diff.entries
        ],
        "lines": diff.lines(),
    }


# -- building --------------------------------------------------------------------------------------


def _header(record: RecordView) -> tuple[str, ...]:
    took = ""
    if record.finished_at is not None:
        took = f", {(record.finished_at - record.started_at).total_seconds():.1f}s"
    lines = [
        f"record #{record.id}: {record.job} on {record.namespace!r}, {record.status}, "
        f"{record.started_at.isoformat(timespec='seconds')}{took}"
    ]
    if record.undoes_id is not None:
        lines.append(f"undoes record #{record.undoes_id}: puts back what it changed")
    if record.undone_by_id is not None:
        lines.append(f"undone by record #{record.undone_by_id}")
    # An approved plan's changes are in the record that applied it, and the other way round.
    if isinstance(record.stats.get("applied_as"), int):
        lines.append(f"plan approved: its changes are record #{record.stats['applied_as']}")
    if isinstance(record.stats.get("approved_plan"), int):
        lines.append(f"applies the approved plan of record #{record.stats['approved_plan']}")
    if record.error:
        lines.append(f"error: {record.error}")
    return tuple(lines)


class _Texts:
    """Memory texts: the record's own images first, then the lookup's current texts."""

    def __init__(self, ops: Sequence[OperationView], looked_up: Mapping[int, str]) -> None:
        self._texts = dict(looked_up)
        self._gone: set[int] = set()  # purged or forgotten: the record keeps no text
        for op in ops:
            if op.target_kind == "memory":
                image = (op.after if op.after is not None else op.before) or {}
                if image.get("forgotten"):
                    self._gone.add(op.target_id)
                    self._texts.pop(op.target_id, None)
                else:
                    self._texts[op.target_id] = str(image.get("content", ""))

    def full(self, memory_id: int | None) -> str | None:
        return None if memory_id is None else self._texts.get(memory_id)

    def quoted(self, memory_id: int | None) -> str:
        if memory_id in self._gone:
            return NOT_KEPT
        text = self.full(memory_id)
        return "(unknown)" if text is None else _quote(text)

    def named(self, memory_id: int) -> str:
        return f"#{memory_id} {self.quoted(memory_id)}"


def _quote(text: str) -> str:
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 1] + "…"
    return json.dumps(text, ensure_ascii=False)


def _short(value: Any) -> str:
    return _quote(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _Builder:
    def __init__(self, record: RecordView, ops: Sequence[OperationView], texts: _Texts) -> None:
        self.undo = record.undoes_id is not None
        self.texts = texts
        self.memories = [op for op in ops if op.target_kind == "memory"]
        self.relations = [op for op in ops if op.target_kind == "relation"]
        self.lines = [op for op in ops if op.target_kind == "log"]
        self.kinds = {id(op): image_kind(op.op, op.before, op.after) for op in ops}
        self.created = {op.target_id: op for op in self.memories if op.before is None}
        self.folded: set[int] = set()  # relation operations told within another entry

    def of_kind(self, kind: str) -> list[OperationView]:
        return [op for op in self.memories if self.kinds[id(op)] == kind]

    def build(self) -> list[DiffEntry]:
        entries = self.merges()
        handled = {i for entry in entries for i in entry.ids}
        entries += [self.retired(op) for op in self.of_kind("superseded")]
        entries += [self.retired(op) for op in self.of_kind("archived")]
        entries += [self.reactivated(op) for op in self.of_kind("reactivated")]
        entries += [self.new(op) for op in self.of_kind("created") if op.target_id not in handled]
        entries += [self.updated(op) for op in self.of_kind("updated")]
        entries += [self.deleted(op) for op in self.of_kind("deleted")]
        entries += [self.relation(op) for op in self.relations if op.target_id not in self.folded]
        entries += [self.log_line(op) for op in self.lines]
        relinked = [op.target_id for op in self.of_kind("relinked")]
        if relinked:
            shown = ", ".join(f"#{i}" for i in relinked)
            entries.append(
                DiffEntry(
                    kind="relinked",
                    line=f"timeline relinked: {shown}",
                    ids=tuple(relinked),
                )
            )
        return entries

    def evidence(self, source: int, among: Collection[int] | None = None) -> list[int]:
        """The targets of the ``derived_from`` relations this record created from ``source``
        (only those ``among`` given ids); they are told with the source's entry."""
        found = []
        for op in self.relations:
            image = op.after
            if op.before is not None or image is None or image.get("type") != _DERIVED_FROM:
                continue
            target = int(image["target_id"])
            if image["source_id"] == source and (among is None or target in among):
                self.folded.add(op.target_id)
                found.append(target)
        return found

    def merges(self) -> list[DiffEntry]:
        groups: dict[int | None, list[int]] = {}
        for op in self.of_kind("merged"):
            groups.setdefault((op.after or {}).get("replaced_by_id"), []).append(op.target_id)
        entries = []
        for into, merged in groups.items():
            sources = ", ".join(f"#{i}" for i in merged)
            if into is None:
                line = f"{sources} merged"
            else:
                line = f"{sources} -> #{into}: {self.texts.quoted(into)}"
                if into in self.created:
                    self.evidence(into, merged)
                    line += " (new)"
            entries.append(
                DiffEntry(
                    kind="merged",
                    line=line,
                    ids=(*merged, *((into,) if into is not None and into in self.created else ())),
                    details=tuple(f"was {self.texts.named(i)}" for i in merged),
                    data={
                        "merged": [{"id": i, "text": self.texts.full(i)} for i in merged],
                        "into": None
                        if into is None
                        else {"id": into, "text": self.texts.full(into)},
                        "into_is_new": into in self.created,
                    },
                )
            )
        return entries

    def retired(self, op: OperationView) -> DiffEntry:
        kind, memory_id = self.kinds[id(op)], op.target_id
        by = (op.after or {}).get("replaced_by_id")
        before = (op.before or {}).get("content")
        data: dict[str, Any] = {"id": memory_id, "text": before}
        if kind == "superseded" and by is not None:
            line = f"#{memory_id} superseded by #{by}: {_short(before)} -> {self.texts.quoted(by)}"
            data["by"] = {"id": by, "text": self.texts.full(by)}
            ids: tuple[int, ...] = (memory_id, by)
        else:
            line, ids = f"#{memory_id} {kind}: {_short(before)}", (memory_id,)
        return DiffEntry(kind=kind, line=line, ids=ids, data=data)

    def reactivated(self, op: OperationView) -> DiffEntry:
        was = (op.before or {}).get("status")
        verb = "restored to active" if self.undo else "reactivated"
        line = f"#{op.target_id} {verb} (was {was}): {self.texts.quoted(op.target_id)}"
        data = {"id": op.target_id, "text": self.texts.full(op.target_id), "was": was}
        return DiffEntry(kind="reactivated", line=line, ids=(op.target_id,), data=data)

    def new(self, op: OperationView) -> DiffEntry:
        image, memory_id = op.after or {}, op.target_id
        evidence = self.evidence(memory_id)
        status = image.get("status")
        if self.undo:
            kind, line = "recreated", f"#{memory_id} recreated ({status})"
        elif image.get("type") == _TRAIT_TYPE and evidence:
            kind, line = "trait", f"new trait #{memory_id}"
        else:
            kind, line = "created", f"new #{memory_id} ({image.get('type')})"
        return DiffEntry(
            kind=kind,
            line=f"{line}: {self.texts.quoted(memory_id)}",
            ids=(memory_id, *evidence),
            details=tuple(f"evidence {self.texts.named(i)}" for i in evidence),
            data={
                "id": memory_id,
                "text": image.get("content"),
                "type": image.get("type"),
                "importance": image.get("importance"),
                "evidence": [{"id": i, "text": self.texts.full(i)} for i in evidence],
            },
        )

    def updated(self, op: OperationView) -> DiffEntry:
        before, after = op.before or {}, op.after or {}
        changed = [name for name in _FIELDS if before.get(name) != after.get(name)]
        details = tuple(
            f"{name}: {_short(before.get(name))} -> {_short(after.get(name))}" for name in changed
        )
        line = f"#{op.target_id} updated"
        if before.get("content") != after.get("content"):
            line += f": {_short(before.get('content'))} -> {_short(after.get('content'))}"
        elif changed:
            line += f" ({', '.join(changed)})"
        data = {
            "id": op.target_id,
            "before": before.get("content"),
            "after": after.get("content"),
            "fields": {
                name: {"before": before.get(name), "after": after.get(name)} for name in changed
            },
        }
        return DiffEntry(kind="updated", line=line, ids=(op.target_id,), details=details, data=data)

    def deleted(self, op: OperationView) -> DiffEntry:
        image, memory_id = op.before or {}, op.target_id
        if self.undo:
            line = f"#{memory_id} removed (the undone record created it)"
        else:
            into = image.get("replaced_by_id")
            where = f" into #{into}" if into is not None else ""
            line = f"#{memory_id} purged ({image.get('status')}{where})"
        data = {"id": memory_id, "text": image.get("content"), "status": image.get("status")}
        text = NOT_KEPT if image.get("forgotten") else _short(image.get("content"))
        return DiffEntry(
            kind="deleted",
            line=f"{line}: {text}",
            ids=(memory_id,),
            data=data,
        )

    def log_line(self, op: OperationView) -> DiffEntry:
        """A conversation log line an ingest updated (or an undo put back)."""
        before, after = op.before or {}, op.after or {}
        gone = bool(before.get("forgotten") or after.get("forgotten"))
        changed = [name for name in _LINE_FIELDS if before.get(name) != after.get(name)]
        line = f"log line #{op.target_id} {'put back' if self.undo else 'updated'}"
        if gone:
            line, changed = f"{line}: {NOT_KEPT}", []
        elif before.get("content") != after.get("content"):
            line += f": {_short(before.get('content'))} -> {_short(after.get('content'))}"
        elif changed:
            line += f" ({', '.join(changed)})"
        return DiffEntry(
            kind="log_updated",
            line=line,
            ids=(),
            details=tuple(
                f"{name}: {_short(before.get(name))} -> {_short(after.get(name))}"
                for name in changed
            ),
            data={
                "log_id": op.target_id,
                "before": before.get("content"),
                "after": after.get("content"),
                "fields": {
                    name: {"before": before.get(name), "after": after.get(name)} for name in changed
                },
            },
        )

    def relation(self, op: OperationView) -> DiffEntry:
        image = op.after if op.after is not None else op.before or {}
        source, target = int(image["source_id"]), int(image["target_id"])
        strength = float(image.get("strength") or 0.0)
        edge = (
            f"{self.texts.named(source)} -[{image.get('type')} {strength:.2f}]-> "
            f"{self.texts.named(target)}"
        )
        kind = self.kinds[id(op)]
        details: tuple[str, ...] = ()
        if kind == "relations_created":
            line = f"new relation {edge}"
        elif kind == "relations_deleted":
            line = f"relation removed: {edge}"
        else:
            before = op.before or {}
            line = f"relation changed: {edge}"
            details = tuple(
                f"{name}: {_short(before.get(name))} -> {_short(image.get(name))}"
                for name in ("type", "strength", "description")
                if before.get(name) != image.get(name)
            )
        if image.get("description") and not details:
            details = (f"because: {_short(image['description'])}",)
        return DiffEntry(
            kind=kind,
            line=line,
            ids=(source, target),
            details=details,
            data={
                "relation_id": op.target_id,
                "type": image.get("type"),
                "strength": strength,
                "description": image.get("description"),
                "source": {"id": source, "text": self.texts.full(source)},
                "target": {"id": target, "text": self.texts.full(target)},
            },
        )
