"""Moving an export into another namespace: every id shifted by one offset, the namespace renamed.

Ids are shared by every namespace of a store, so an export restored into another namespace (of
the same store or another one) needs ids nobody has used: each becomes ``id + offset``, the
offset being past every id the target store has used. One offset for every table keeps ids that
point across tables right without knowing which table they name (a watermark is a memory id for
one job and a log id for another). What is shifted: the rows' ids and their links (timeline,
replacement, relation ends, undo links), ``source_log_ids`` in a memory's metadata, the ids in
records (operations' targets and images, a pending plan's operations, targets and watermarks,
the ids of dropped, protected and quarantined items, the records a record names, what an
erasure record lists) and in the jobs' state and health. Schedules belong to a store, not a
namespace: they are not moved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from store.exports.lines import (
    Export,
    JobStateLine,
    Labelled,
    LogLine,
    MemoryLine,
    RecordLine,
    RelationLine,
)

_MEMORY_LINKS = ("id", "prev_id", "next_id", "replaced_by_id")
_RELATION_LINKS = ("id", "source_id", "target_id")
# Keys of a record's stats that hold ids (or lists of them), whatever job wrote them.
_STATS_IDS = frozenset(
    {
        "applied_as",
        "approved_plan",
        "memory",
        "dropped_ids",
        "protected_ids",
        "quarantined",
        "failed_batch",
        "relations",  # an erasure record's (store.write.forget)
        "logs",
    }
)
# Fields of an encoded plan operation (store.operations) that hold memory ids.
_OPERATION_IDS = frozenset(
    {"memory_id", "replaced_by", "source", "target", "from_ids", "to", "replaces_in_timeline"}
)


def move(export: Export, namespace: str, offset: int) -> Export:
    """Return the export in ``namespace`` with every id shifted by ``offset`` (no schedules)."""
    shift = _Shift(offset)
    return Export(
        memories=_each(export.memories, lambda line: shift.memory(line, namespace)),
        relations=_each(export.relations, lambda line: shift.relation(line, namespace)),
        logs=_each(export.logs, lambda line: shift.log(line, namespace)),
        records=_each(export.records, lambda line: shift.record(line, namespace)),
        job_states=_each(export.job_states, lambda line: shift.job_state(line, namespace)),
    )


def _each(entries: list[Labelled], change: Callable[[Any], Any]) -> list[Labelled]:
    return [replace(entry, line=change(entry.line)) for entry in entries]


class _Shift:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def id(self, value: Any) -> Any:
        """Shift an id, or each id of a list; leave anything else (None, labels) alone."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return value + self.offset
        if isinstance(value, list):
            return [self.id(item) for item in value]
        return value

    def _fields(
        self, data: Mapping[str, Any], names: frozenset[str] | tuple[str, ...]
    ) -> dict[str, Any]:
        return {**data, **{name: self.id(data[name]) for name in names if name in data}}

    # -- lines -----------------------------------------------------------------------------------

    def memory(self, line: MemoryLine, namespace: str) -> MemoryLine:
        image = self.memory_image(line.image(), namespace)
        return line.model_copy(
            update={k: image[k] for k in (*_MEMORY_LINKS, "namespace", "metadata")}
        )

    def relation(self, line: RelationLine, namespace: str) -> RelationLine:
        image = self.relation_image(line.image(), namespace)
        return line.model_copy(update={k: image[k] for k in (*_RELATION_LINKS, "namespace")})

    def log(self, line: LogLine, namespace: str) -> LogLine:
        return line.model_copy(update={"id": self.id(line.id), "namespace": namespace})

    def record(self, line: RecordLine, namespace: str) -> RecordLine:
        operations = [
            op.model_copy(
                update={
                    "target_id": self.id(op.target_id),
                    "before": self.image(op.target_kind, op.before, namespace),
                    "after": self.image(op.target_kind, op.after, namespace),
                }
            )
            for op in line.operations
        ]
        return line.model_copy(
            update={
                "id": self.id(line.id),
                "namespace": namespace,
                "undoes_id": self.id(line.undoes_id),
                "undone_by_id": self.id(line.undone_by_id),
                "stats": self.stats(line.stats, namespace),
                "operations": operations,
            }
        )

    def job_state(self, line: JobStateLine, namespace: str) -> JobStateLine:
        health = dict(line.health)
        if "quarantined" in health:
            health["quarantined"] = self.id(health["quarantined"])
        if isinstance(health.get("failing"), Mapping) and "ids" in health["failing"]:
            health["failing"] = {**health["failing"], "ids": self.id(health["failing"]["ids"])}
        return line.model_copy(
            update={"namespace": namespace, "state": self.marks(line.state), "health": health}
        )

    # -- what lines hold -------------------------------------------------------------------------

    def image(self, kind: str, image: Mapping[str, Any] | None, namespace: str) -> Any:
        if image is None:
            return None
        if kind == "memory":
            return self.memory_image(image, namespace)
        if kind == "log":  # a conversation line an ingest updated
            return {**self._fields(image, ("id",)), "namespace": namespace}
        return self.relation_image(image, namespace)

    def memory_image(self, image: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        moved = {**self._fields(image, _MEMORY_LINKS), "namespace": namespace}
        metadata = image.get("metadata")
        if isinstance(metadata, Mapping) and "source_log_ids" in metadata:
            moved["metadata"] = {**metadata, "source_log_ids": self.id(metadata["source_log_ids"])}
        return moved

    def relation_image(self, image: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        return {**self._fields(image, _RELATION_LINKS), "namespace": namespace}

    def marks(self, state: Mapping[str, Any] | None) -> Any:
        """A job's watermarks: every one is an id."""
        if state is None:
            return None
        return {key: self.id(value) for key, value in state.items()}

    def stats(self, stats: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        moved = self._fields(stats, _STATS_IDS)
        if "namespace" in stats:
            moved["namespace"] = namespace
        if isinstance(stats.get("memories"), list):  # an erasure record's: ids and hashes
            moved["memories"] = [
                self._fields(item, ("id",)) if isinstance(item, Mapping) else self.id(item)
                for item in stats["memories"]
            ]
        plan = stats.get("plan")
        if isinstance(plan, Mapping):
            moved["plan"] = {
                **plan,
                "changes": [
                    {
                        **change,
                        "operations": [
                            self._fields(op, _OPERATION_IDS) for op in change["operations"]
                        ],
                    }
                    for change in plan.get("changes", [])
                ],
                "job_state": self.marks(plan.get("job_state")),
                "base_state": self.marks(plan.get("base_state")),
                "targets": {
                    str(self.id(int(k))): v for k, v in (plan.get("targets") or {}).items()
                },
            }
        return moved
