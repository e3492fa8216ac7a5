"""The JSON shape of maintenance records, shared by the API and `secretary records --json`.

``record_json`` and ``record_detail_json`` are the stored record as it is (the golden replay
pins them); the ``summary`` and ``show`` shapes add what the operator reads at a glance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from store.changes import count_kinds, describe, image_kind, ordered, plural
from store.views import OperationView, RecordView


def record_json(record: RecordView) -> dict[str, Any]:
    return {
        "id": record.id,
        "job": record.job,
        "namespace": record.namespace,
        "status": record.status,
        "started_at": record.started_at.isoformat(),
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
        "undoes_id": record.undoes_id,
        "undone_by_id": record.undone_by_id,
    }


def record_detail_json(record: RecordView, operations: Sequence[OperationView]) -> dict[str, Any]:
    return {
        **record_json(record),
        "model": record.model,
        "prompts": [dict(p) for p in record.prompts],
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cost": record.cost,
        "stats": dict(record.stats),
        "error": record.error,
        "operations": [
            {
                "seq": op.seq,
                "op": op.op,
                "target_kind": op.target_kind,
                "target_id": op.target_id,
                "before": op.before,
                "after": op.after,
            }
            for op in sorted(operations, key=lambda o: o.seq)
        ],
    }


# -- what the operator reads: `records list` / `records show` and the records API ------------

# Why a run changed less than it might have, by the stats key that says so.
_REASONS = (
    ("refused", "{}"),
    ("stale", "stale plan: {}"),
    ("stopped", "stopped early: {}"),
    ("skipped", "LLM part skipped: {}"),
)


def run_reason(stats: Mapping[str, Any]) -> str | None:
    """Return why a run was refused, stopped or skipped (or its plan rejected), if it was."""
    said = [
        template.format(stats[key])
        for key, template in _REASONS
        if isinstance(stats.get(key), str) and stats[key]
    ]
    if isinstance(stats.get("skipped"), list) and stats["skipped"]:  # a forced undo's conflicts
        said.append(f"{plural(len(stats['skipped']), 'conflicting part')} skipped")
    if stats.get("rejected"):
        said.append("plan rejected")
    return "; ".join(said) or None


def duration_seconds(record: RecordView) -> float | None:
    if record.finished_at is None:
        return None
    return round((record.finished_at - record.started_at).total_seconds(), 3)


def record_summary_json(record: RecordView, changes: Mapping[str, int]) -> dict[str, Any]:
    """A record as `records list` shows it: ``record_json`` plus duration, changes by kind,
    what it did in words, tokens, cost, the items it dropped and quarantined, error and reason."""
    return {
        **record_json(record),
        "duration_seconds": duration_seconds(record),
        "changes_by_kind": ordered(changes),
        "summary": summary(record, changes),
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "cost": record.cost,
        "dropped_count": dropped_total(record.stats),
        "quarantined_count": len(quarantined_ids(record.stats)),
        "error": record.error,
        "reason": run_reason(record.stats),
    }


def summary(record: RecordView, changes: Mapping[str, int]) -> str:
    """What a record did, in words: "2 created, 1 merged"; "erased 1 memory (#59), 2
    relations; 2 relinked" (a forget); "applied nothing" (a run that dropped what it got);
    "no changes"."""
    erased = erased_words(record.stats) if record.job == "forget" else None
    if erased is not None:
        return f"{erased}; {describe(changes)}" if changes else erased
    if not changes and record.status == "applied" and dropped_items(record.stats):
        return "applied nothing"
    return describe(changes)


def outcome_badge(record: RecordView, changes: Mapping[str, int], dropped: int) -> tuple[str, str]:
    """A record's outcome as a badge: its words and class. A run stored as applied that changed
    nothing is not shown as applied: "applied nothing" (a warning) when it dropped what it got,
    else "no changes"; a forget says "erased"."""
    if record.status != "applied":
        return record.status, record.status
    if record.job == "forget":
        return "erased", "erased"
    if changes:
        return "applied", "applied"
    return ("applied nothing", "warn") if dropped else ("no changes", "plain")


def erased_words(stats: Mapping[str, Any]) -> str | None:
    """What an erasure record says it erased: "erased 1 memory (#59), 2 relations, 1 log line";
    None if its stats name nothing (not an erasure's)."""
    memories = [m.get("id") for m in stats.get("memories") or () if isinstance(m, Mapping)]
    relations, logs = len(stats.get("relations") or ()), len(stats.get("logs") or ())
    if not (memories or relations or logs or "irreversible" in stats):
        return None
    ids = ", ".join(f"#{i}" for i in memories[:_IDS_SHOWN])
    ids += ", ..." if len(memories) > _IDS_SHOWN else ""
    parts = [plural(len(memories), "memory", "memories") + (f" ({ids})" if ids else "")]
    if relations:
        parts.append(plural(relations, "relation"))
    if logs:
        parts.append(plural(logs, "log line"))
    return "erased " + ", ".join(parts)


_IDS_SHOWN = 10  # ids an erasure's summary names; `records show` names them all


def quarantined_ids(stats: Mapping[str, Any]) -> list[int]:
    return [i for i in stats.get("quarantined") or () if isinstance(i, int)]


def dropped_total(stats: Mapping[str, Any]) -> int:
    """How many items a run dropped: invalid reply items, ids outside what was sent, and each
    change that would have touched a protected memory (``dropped_items`` says them in one)."""
    items = sum(isinstance(entry, Mapping) for entry in stats.get("dropped") or ())
    return items + len(stats.get("dropped_ids") or ()) + int(stats.get("dropped_protected") or 0)


def dropped_items(stats: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every item a run dropped, with why: invalid reply items, ids outside what was sent, and
    changes that would have touched protected memories."""
    items = [
        {"item": str(entry.get("item", "")), "reason": str(entry.get("reason", ""))}
        for entry in stats.get("dropped") or ()
        if isinstance(entry, Mapping)
    ]
    items += [
        {"item": f"#{memory_id}", "reason": "named by the reply but not sent to it"}
        for memory_id in stats.get("dropped_ids") or ()
    ]
    protected = int(stats.get("dropped_protected") or 0)
    if protected:
        ids = ", ".join(f"#{i}" for i in stats.get("protected_ids") or ())
        items.append(
            {
                "item": plural(protected, "change") + (f" touching {ids}" if ids else ""),
                "reason": "protected memories (pinned, important or recently recalled)",
            }
        )
    return items


def record_show_json(record: RecordView, operations: Sequence[OperationView]) -> dict[str, Any]:
    """A record as `records show` shows it: ``record_detail_json`` plus the summary's fields,
    changes by kind from the images, the items dropped and why, and the quarantined ids."""
    changes = count_kinds(image_kind(op.op, op.before, op.after) for op in operations)
    return {
        **record_detail_json(record, operations),
        **record_summary_json(record, changes),
        "dropped": dropped_items(record.stats),
        "quarantined": quarantined_ids(record.stats),
    }
