"""Approval mode: plans wait as records; approve re-checks and applies, reject drops."""

from __future__ import annotations

from datetime import timedelta

import pytest

from secretary.jobs.base import PlanNotFound
from secretary.jobs.runner import approve_plan, get_pending, pending_plans, reject_plan
from store.models import MemoryStatus
from tests.secretary.jobs.conftest import NOW, World
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
    assert world.store.repository.job_state("auditor", "maya") == {}
    (pending,) = pending_plans(world.store.repository)
    assert (pending.record_id, pending.job, len(pending.changes)) == (
        planned.record_id,
        "auditor",
        1,
    )

    approved = approve_plan(world.store, world.settings, pending.record_id, now=LATER)

    assert approved.status == "applied"
    merged = world.memory(twin)
    assert (merged.status, merged.replaced_by_id) == ("merged", keeper)
    record, _ = world.store.repository.record(pending.record_id)
    assert (record.status, record.stats["applied_as"]) == ("applied", approved.record_id)
    assert world.store.repository.job_state("auditor", "maya")["exact_watermark"] == twin
    assert pending_plans(world.store.repository) == []
    assert world.run("auditor", now=LATER).status == "nothing"


def test_approval_target_changed_since_planning_is_refused(world: World) -> None:
    _, twin = duplicates(world)
    planned = world.run("auditor")
    world.store.repository.set_status("maya", [twin], MemoryStatus.ARCHIVED, now=NOW, job="user")

    outcome = approve_plan(world.store, world.settings, planned.record_id or 0, now=LATER)

    assert outcome.status == "refused"
    assert f"memory #{twin} changed" in outcome.message
    assert world.memory(twin).status == "archived"  # as the user left it
    record, _ = world.store.repository.record(planned.record_id or 0)
    assert record.status == "refused"


def test_approval_reject_drops_plan_and_moves_on(world: World) -> None:
    keeper, twin = duplicates(world)
    planned = world.run("auditor")

    outcome = reject_plan(world.store, planned.record_id or 0, now=LATER)

    assert outcome.status == "refused"
    assert {m.id for m in world.active()} == {keeper, twin}
    record, _ = world.store.repository.record(planned.record_id or 0)
    assert (record.status, record.stats["rejected"]) == ("refused", True)
    assert world.run("auditor", now=LATER).status == "nothing"  # not proposed again
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

    pending = get_pending(world.store.repository, planned.record_id or 0)

    assert pending.changes == planned.plan.changes
    assert pending.stats["llm_calls"] == 1
    approved = approve_plan(world.store, world.settings, pending.record_id, now=LATER)
    assert approved.status == "applied"
    record, _ = world.store.repository.record(approved.record_id or 0)
    assert (record.model, record.prompts) == ("openai/test-model", list(pending.prompts))
    assert record.tokens_in == 0  # counted once, on the planned record
    (made,) = world.active()
    assert made.metadata_["source_log_ids"] == [1, 2]


def test_approval_unknown_plan_raises(world: World) -> None:
    with pytest.raises(PlanNotFound, match="42"):
        get_pending(world.store.repository, 42)
