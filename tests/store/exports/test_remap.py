"""Moving an export into another namespace (pure): every id shifted by one offset, wherever a
record, a job's state or a memory's metadata holds one."""

from __future__ import annotations

from typing import Any

from store.exports.lines import parse_export
from store.exports.remap import move
from store.text import content_hash

T = "2026-01-10T12:00:00+00:00"


def memory(memory_id: int, **fields: Any) -> dict[str, Any]:
    content = fields.pop("content", f"memory {memory_id}")
    return {
        "kind": "memory",
        "id": memory_id,
        "namespace": "old",
        "external_id": None,
        "content": content,
        "content_hash": content_hash(content),
        "type": "event",
        "tags": [],
        "importance": 5,
        "base_importance": 5.0,
        "access_count": 0,
        "last_accessed": None,
        "event_time": T,
        "created_at": T,
        "updated_at": T,
        "session_id": None,
        "prev_id": None,
        "next_id": None,
        "status": "active",
        "replaced_by_id": None,
        "pinned": False,
        "source": "api",
        "metadata": {},
        "version": 1,
        **fields,
    }


def record(record_id: int, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "record",
        "id": record_id,
        "job": "auditor",
        "namespace": "old",
        "status": "planned",
        "started_at": T,
        "finished_at": T,
        "model": None,
        "prompts": [],
        "tokens_in": 0,
        "tokens_out": 0,
        "cost": None,
        "stats": {},
        "error": None,
        "undoes_id": None,
        "undone_by_id": None,
        "operations": [],
        **fields,
    }


def test_move_shifts_every_id_and_renames_the_namespace() -> None:
    plan = {
        "changes": [
            {
                "label": "merge",
                "operations": [
                    {"op": "SetStatus", "memory_id": 1, "status": "merged", "replaced_by": "k"},
                    {"op": "CreateRelation", "source": "k", "target": 2, "type": "x"},
                    {"op": "InheritRelations", "from_ids": [1, 2], "to": "k"},
                ],
            }
        ],
        "job_state": {"watermark": 2},
        "base_state": {"watermark": 1},
        "targets": {"1": 1, "2": 3},
    }
    lines = [
        memory(1, next_id=2, metadata={"source_log_ids": [7, 8], "other": 1}),
        memory(2, prev_id=1, replaced_by_id=None),
        {
            "kind": "relation",
            "id": 4,
            "namespace": "old",
            "source_id": 1,
            "target_id": 2,
            "type": "causal",
            "strength": 0.5,
            "description": "",
            "created_at": T,
        },
        record(
            5,
            stats={"plan": plan, "dropped_ids": [1], "applied_as": 6, "items": 3},
            operations=[
                {
                    "seq": 0,
                    "op": "update_memory",
                    "target_kind": "memory",
                    "target_id": 1,
                    "before": {"id": 1, "namespace": "old", "next_id": 2, "version": 1},
                    "after": None,
                }
            ],
        ),
        record(6, status="applied", undoes_id=5, stats={"namespace": "old", "logs": [7]}),
        {
            "kind": "job_state",
            "job": "auditor",
            "namespace": "old",
            "state": {"watermark": 2, "exact_watermark": 1},
            "health": {"quarantined": [2], "failures": 3},
            "updated_at": T,
        },
        {
            "kind": "schedule",
            "job": "auditor",
            "cron": None,
            "paused": True,
            "last_fired_at": None,
            "last_finished_at": None,
            "next_fire_at": None,
            "updated_at": T,
        },
    ]
    export, problems = parse_export(lines, [f"line {n}" for n in range(1, len(lines) + 1)])
    assert problems == []
    moved = move(export, "new", 100)
    first, second = (entry.line for entry in moved.memories)
    assert (first.id, first.next_id, first.namespace) == (101, 102, "new")
    assert first.metadata == {"source_log_ids": [107, 108], "other": 1}
    assert (second.prev_id, second.replaced_by_id) == (101, None)
    relation = moved.relations[0].line
    assert (relation.id, relation.source_id, relation.target_id) == (104, 101, 102)
    planned, applied = (entry.line for entry in moved.records)
    ops = planned.stats["plan"]["changes"][0]["operations"]
    assert [ops[0]["memory_id"], ops[0]["replaced_by"]] == [101, "k"]
    assert [ops[1]["source"], ops[1]["target"]] == ["k", 102]
    assert ops[2]["from_ids"] == [101, 102]
    assert planned.stats["plan"]["targets"] == {"101": 1, "102": 3}
    assert planned.stats["plan"]["job_state"] == {"watermark": 102}
    assert (planned.stats["dropped_ids"], planned.stats["applied_as"]) == ([101], 106)
    assert planned.stats["items"] == 3  # a count, not an id
    step = planned.operations[0]
    assert step.target_id == 101
    assert step.before == {"id": 101, "namespace": "new", "next_id": 102, "version": 1}
    assert (applied.id, applied.undoes_id, applied.namespace) == (106, 105, "new")
    assert applied.stats == {"namespace": "new", "logs": [107]}
    state = moved.job_states[0].line
    assert state.state == {"watermark": 102, "exact_watermark": 101}
    assert state.health == {"quarantined": [102], "failures": 3}
    assert moved.schedules == []
