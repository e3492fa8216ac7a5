"""Writing an undo plan's steps: field by field, with the derived state recomputed.

A restored row gets back only the fields its record changed (``UndoStep.changed_fields``): a
later change to other fields stays. Derived state is recomputed rather than written back: the
timeline (a memory that leaves it is spliced out first, one that joins it or moves is placed
by its event time once every row is written), the version (the image's own number when the row
is back exactly as the record found it, else one more change), and the content hash.
Recall statistics are kept as they are: a recall after a record is no change to what it did.
What the record itself added to them (``CarryRecalls``) is taken back, later recalls staying.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.clock import parse_timestamp
from store.images import (
    MEMORY_COLUMNS,
    log_values,
    memory_image,
    memory_values,
    relation_values,
)
from store.kinds import MemoryStatus
from store.models import ConversationLog, Memory, MemoryRelation
from store.text import content_hash
from store.write.apply import set_importance
from store.write.undo_conflicts import (
    TIMELINE_FIELDS,
    Action,
    Image,
    UndoStep,
    carried_recalls,
    visible,
)
from store.write.unit import UnitOfWork

_ATTRIBUTE = {column: attr for attr, column in MEMORY_COLUMNS}
_ACTIVE = MemoryStatus.ACTIVE.value


class Restorer:
    """Writes the steps in an order that every immediate foreign key check accepts."""

    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit
        self.session = unit.session

    def run(self, steps: Sequence[UndoStep]) -> None:
        def picked(kind: str, action: Action) -> list[UndoStep]:
            return [s for s in steps if s.kind == kind and s.action == action]

        restores = picked("memory", "restore")
        deletes = picked("memory", "delete")
        # Off the timeline first, while its links still describe it: memories that go, leave
        # it or move on it. They come back (placed by event time) once every row is written.
        joining = self._splice_out(restores, deletes)
        joining += self._recreate_memories(picked("memory", "recreate"))
        for step in restores:
            self._restore_memory(step)
        self.session.flush()
        self._delete_relations(picked("relation", "delete"))
        for step in picked("relation", "recreate"):
            self._recreate_relation(step)
        for step in picked("relation", "restore"):
            self._restore_relation(step)
        for step in picked("log", "restore"):
            self._restore_log(step)
        self.session.flush()
        # Created memories go last: by now nothing restored points at them any more.
        self._delete_memories(deletes)
        self.session.flush()
        self.unit.link_all_into_timeline([m for m in joining if m.status == _ACTIVE])

    # -- the timeline ------------------------------------------------------------------------------

    def _splice_out(
        self, restores: Sequence[UndoStep], deletes: Sequence[UndoStep]
    ) -> list[Memory]:
        """Take off the timeline what the undo removes or moves; return what may come back."""
        moving = [
            step for step in restores if {"status", "event_time"} & set(step.changed_fields())
        ]
        returning: list[Memory] = []
        for step in [*moving, *deletes]:
            memory = self.session.get(Memory, step.target_id)
            assert memory is not None  # the plan checked it exists, under the namespace lock
            if memory.status == _ACTIVE:
                self.unit.splice_out(memory)
            else:  # off the timeline already
                memory.prev_id = memory.next_id = None
            if step.action == "restore":
                returning.append(memory)
        return returning

    # -- memories ----------------------------------------------------------------------------------

    def _recreate_memories(self, steps: Sequence[UndoStep]) -> list[Memory]:
        rows: list[tuple[Memory, int | None]] = []
        for step in steps:
            values = memory_values(step.image or {})
            for name in TIMELINE_FIELDS:
                values[name] = None  # placed by event time once every row is back
            # Set once every recreated row exists: it may name one recreated after it.
            replaced_by = values.pop("replaced_by_id")
            memory = Memory(**values)
            self.session.add(memory)
            rows.append((memory, replaced_by))
        self.session.flush()
        for memory, replaced_by in rows:
            memory.replaced_by_id = replaced_by
        self.session.flush()
        for memory, _ in rows:
            self.unit.created(memory)
        return [memory for memory, _ in rows]

    def _restore_memory(self, step: UndoStep) -> None:
        memory = self.session.get(Memory, step.target_id)
        assert memory is not None  # the plan checked it exists, under the namespace lock
        self.unit.touch(memory)
        image = step.image or {}
        values = memory_values(image)
        for column in step.changed_fields():
            value = values[_ATTRIBUTE[column]]
            if column == "importance":
                set_importance(memory, value)  # the recall boost stays, as recalls do
            else:
                setattr(memory, _ATTRIBUTE[column], value)
        memory.content_hash = content_hash(memory.content)
        if carried_recalls(image, step.expected):
            take_back_recalls(memory, image, step.expected or {})
        if visible(memory_image(memory)) == visible(image):
            # Back exactly as the record found it: the version it had then, so undos in
            # reverse order give back the very rows.
            memory.version, memory.updated_at = values["version"], values["updated_at"]
        else:  # a later change stays beside the restored fields: one more change
            memory.version += 1
            memory.updated_at = self.unit.now

    def _delete_memories(self, steps: Sequence[UndoStep]) -> None:
        rows = [self.session.get(Memory, step.target_id) for step in steps]
        present = [row for row in rows if row is not None]
        for row in present:
            self.unit.deleted(row)  # before the links change: the image is the stored row
        # Links among the rows going away would otherwise depend on the order of deletes.
        for row in present:
            row.prev_id = row.next_id = row.replaced_by_id = None
        self.session.flush()
        self._delete(present)

    # -- relations and log lines -------------------------------------------------------------------

    def _recreate_relation(self, step: UndoStep) -> None:
        relation = MemoryRelation(**relation_values(step.image or {}))
        self.session.add(relation)
        self.session.flush()
        self.unit.created(relation)

    def _restore_relation(self, step: UndoStep) -> None:
        relation = self.session.get(MemoryRelation, step.target_id)
        assert relation is not None  # the plan checked it exists, under the namespace lock
        self.unit.touch(relation)
        values = relation_values(step.image or {})
        for name in step.changed_fields():
            setattr(relation, name, values[name])

    def _restore_log(self, step: UndoStep) -> None:
        line = self.session.get(ConversationLog, step.target_id)
        assert line is not None  # the plan checked it exists, under the namespace lock
        self.unit.touch(line)
        for name, value in log_values(step.image or {}).items():
            if name != "id":
                setattr(line, name, value)

    def _delete_relations(self, steps: Sequence[UndoStep]) -> None:
        rows = [self.session.get(MemoryRelation, step.target_id) for step in steps]
        self._delete([row for row in rows if row is not None])

    def _delete(self, rows: Sequence[Memory | MemoryRelation]) -> None:
        for row in rows:
            self.unit.deleted(row)
            self.session.delete(row)
        self.session.flush()


def take_back_recalls(memory: Memory, before: Image, after: Image) -> None:
    """Undo what a record added to a memory's recall statistics (``CarryRecalls``): exactly
    the values before it when nothing was recalled since, else its share alone."""
    now = memory_image(memory)
    recalled_since = any(now[name] != after.get(name) for name in _RECALLS)
    if not recalled_since:
        memory.access_count = int(before["access_count"])
        memory.last_accessed = _time(before.get("last_accessed"))
        if memory.importance == before["importance"]:
            memory.base_importance = float(before["base_importance"])
            return
    else:
        added = int(after["access_count"]) - int(before["access_count"])
        memory.access_count = max(0, memory.access_count - added)
    boost = float(before["base_importance"]) - int(before["importance"])
    carried = float(after["base_importance"]) - int(after["importance"]) - boost
    base = memory.base_importance - carried if recalled_since else memory.importance + boost
    memory.base_importance = min(10.0, max(float(memory.importance), base))


_RECALLS = ("access_count", "last_accessed", "base_importance")


def _time(value: Any) -> Any:
    return parse_timestamp(value) if isinstance(value, str) else value
