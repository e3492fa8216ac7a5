"""Approval mode: plans wait as records; approve re-checks and applies, reject drops."""

from __future__ import annotations

from datetime import timedelta

import pytest

from secretary.approval import PlanNotFound, approve_plan, get_pending, pending_plans, reject_plan
from store.kinds import MemoryStatus
from tests.secretary.jobs.conftest import NOW, World
from tests.secretary.jobs.test_auditor import verdict
from tests.secretary.jobs.test_extractor import lines, memory

LATER = NOW + timedelta(hours=1)


def duplicates(world: World) -> tuple[int, int]:
    world.configure(jobs={"approval": "changes"})
    (keeper,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="a"
    )
    (twin,) = world.memories(
        content="The user is allergic to peanuts.", type="fact", session_id="b"
    )
    return keeper, twin


def test_approval_plan_waits_until_approved(world: World) -> None:
    keeper, twin = duplicates(world)

    planned = world.run("auditor")

    assert planned.status == "planned"
    assert world.memory(twin).status == "active"  # nothing applied yet
    assert world.store.db.work.job_state("auditor", "maya") == {}
    (pending,) = pending_plans(world.store.db)
    assert (pending.record_id, pending.job, len(pending.changes)) == (
        planned.record_id,
        "auditor",
        1,
    )

    approved = approve_plan(world.store, world.settings, pending.record_id, now=LATER)

    assert approved.status == "applied"
    merged = world.memory(twin)
    assert (merged.status, merged.replaced_by_id) == ("merged", keeper)
    record, _ = world.store.db.records.get(pending.record_id)
    assert (record.status, record.stats["applied_as"]) == ("applied", approved.record_id)
    # Its duration is the planning run's, not the wait; when it was decided is said beside it.
    assert record.finished_at is not None
    assert record.finished_at < LATER
    assert record.stats["decided_at"] == LATER.isoformat()
    assert world.store.db.work.job_state("auditor", "maya")["exact_watermark"] == twin
    assert pending_plans(world.store.db) == []
    assert world.run("auditor", now=LATER).status == "nothing"


def test_approval_target_changed_since_planning_is_refused(world: World) -> None:
    _, twin = duplicates(world)
    planned = world.run("auditor")
    world.set_status(twin, MemoryStatus.ARCHIVED)  # the user changes it meanwhile

    outcome = approve_plan(world.store, world.settings, planned.record_id or 0, now=LATER)

    assert outcome.status == "refused"
    assert f"memory #{twin} changed" in outcome.message
    assert world.memory(twin).status == "archived"  # as the user left it
    record, _ = world.store.db.records.get(planned.record_id or 0)
    assert record.status == "refused"


def test_approval_reject_drops_plan_and_moves_on(world: World) -> None:
    keeper, twin = duplicates(world)
    planned = world.run("auditor")

    outcome = reject_plan(world.store, planned.record_id or 0, now=LATER)

    assert outcome.status == "refused"
    assert {m.id for m in world.active()} == {keeper, twin}
    record, _ = world.store.db.records.get(planned.record_id or 0)
    assert (record.status, record.stats["rejected"]) == ("refused", True)
    # The exact-duplicate part moved past them; the model's part now judges them (keep both).
    world.reply({"verdicts": [verdict(keeper), verdict(twin)]})
    assert world.run("auditor", now=LATER).status == "nothing"  # the merge is not proposed again
    assert {m.id for m in world.active()} == {keeper, twin}
    with pytest.raises(PlanNotFound):
        approve_plan(world.store, world.settings, planned.record_id or 0, now=LATER)


def test_approval_changes_mode_applies_additions_at_once(world: World) -> None:
    world.configure(jobs={"approval": "changes"})
    world.logs(lines())
    world.reply({"memories": [memory("The user adopted a cat named Miso.", [1])]})

    assert world.run("extractor").status == "applied"


def test_approval_all_mode_plan_round_trips_through_its_record(world: World) -> None:
    world.configure(jobs={"approval": "all"})
    world.logs(lines())
    world.reply({"memories": [memory("The user adopted a cat named Miso.", [1, 2])]})
    planned = world.run("extractor")
    assert planned.plan is not None

    pending = get_pending(world.store.db, planned.record_id or 0)

    assert pending.changes == planned.plan.changes
    assert pending.stats["llm_calls"] == 1
    approved = approve_plan(world.store, world.settings, pending.record_id, now=LATER)
    assert approved.status == "applied"
    record, _ = world.store.db.records.get(approved.record_id or 0)
    assert (record.model, list(record.prompts)) == ("openai/test-model", list(pending.prompts))
    assert record.tokens_in == 0  # counted once, on the planned record
    (made,) = world.active()
    assert made.metadata["source_log_ids"] == [1, 2]


def test_approval_unknown_plan_raises(world: World) -> None:
    with pytest.raises(PlanNotFound, match="42"):
        get_pending(world.store.db, 42)
