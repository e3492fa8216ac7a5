"""A forget while a job waits on the model: the plan it stores afterwards carries nothing back.

The consolidator reads the fragments, then waits on a slow model; meanwhile a person forgets one
fragment. The plan it stores then (for approval, or refused by the change cap) must hold no word
of the summary built from it, and cannot be approved; a plan stored before the forget is
refused by the forget itself. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from secretary.outcomes import RunOutcome
from store.write.forget import ForgetSelection
from tests.helpers.openai_server import CHAT_COMPLETIONS, ReceivedRequest, ScriptedReply, chat_reply
from tests.secretary.jobs.conftest import NS, World
from tests.secretary.jobs.test_consolidator import LATER, episode

MARKER = "Xanthoria"  # in the summary the model writes from the fragments


def _summary(fragments: list[int]) -> str:
    return json.dumps(
        {
            "summary": f"{MARKER}: Maya hiked up and down the Alps with Tom.",
            "importance": 6,
            "tags": ["hiking"],
            "source_ids": fragments,
        }
    )


def _slow_model(
    fragments: list[int],
) -> tuple[Callable[..., ScriptedReply], threading.Event, threading.Event]:
    """A reply that says it was asked, then waits until released."""
    asked, release = threading.Event(), threading.Event()

    def reply(_request: ReceivedRequest) -> ScriptedReply:
        asked.set()
        assert release.wait(30), "the test never released the model"
        return chat_reply(_summary(fragments))

    return reply, asked, release


def _run_racing_a_forget(world: World, forget_id: int, fragments: list[int]) -> RunOutcome:
    # The model answers once the forget is done; on busy cores that took longer than the
    # suite's 2 s LLM timeout, and the retried call found no scripted reply.
    llm = world.settings.llm.model_copy(update={"timeout_seconds": 60.0})
    world.settings = world.settings.model_copy(update={"llm": llm})
    reply, asked, release = _slow_model(fragments)
    world.server.enqueue(CHAT_COMPLETIONS, reply)
    outcomes: list[RunOutcome] = []
    job = threading.Thread(target=lambda: outcomes.append(world.run("consolidator", now=LATER)))
    job.start()
    try:
        assert asked.wait(30), "the consolidator never asked the model"
        world.store.forget(NS, ForgetSelection(ids=(forget_id,)), now=LATER, by="test")
    finally:
        release.set()
        job.join(60)
    (outcome,) = outcomes
    return outcome


def _everything_stored(world: World) -> str:
    records = [world.store.db.records.get(r.id) for r in world.records()]
    return json.dumps(
        [
            [record.stats, record.error, [(o.before, o.after) for o in ops]]
            for record, ops in records
        ],
        default=str,
    )


@pytest.mark.parametrize(
    ("settings", "refused_by_cap"),
    [
        ({"jobs": {"approval": "changes"}}, False),  # the plan waits for approval
        ({"guardrails": {"max_changes_per_run": 1}}, True),  # the cap refuses it, approvable
    ],
    ids=["awaiting-approval", "refused-by-the-cap"],
)
def test_a_plan_stored_after_a_forget_holds_nothing_of_it(
    world: World, settings: dict[str, dict[str, object]], refused_by_cap: bool
) -> None:
    world.configure(**settings)
    m = episode(world)
    fragments = [m["up"], m["top"], m["down"]]

    outcome = _run_racing_a_forget(world, m["top"], fragments)

    assert outcome.status == "refused"
    assert "erased while it was planned" in outcome.message
    stored = world.store.db.records.get(outcome.record_id)[0]  # type: ignore[arg-type]
    assert stored.status == "refused"
    assert stored.stats["refused_by"] == "forget"
    assert stored.stats["plan"]["changes"] == []
    assert MARKER not in _everything_stored(world)
    assert [x for x in world.active() if x.type == "interaction_summary"] == []
    # the other fragments are as they were: nothing was applied
    assert {world.memory(f).status for f in (m["up"], m["down"])} == {"active"}
    del refused_by_cap  # both ways end alike: nothing left to approve


def test_a_plan_stored_before_a_forget_is_refused_by_it(world: World) -> None:
    world.configure(jobs={"approval": "changes"})
    m = episode(world)
    fragments = [m["up"], m["top"], m["down"]]
    world.server.enqueue(CHAT_COMPLETIONS, chat_reply(_summary(fragments)))
    planned = world.run("consolidator", now=LATER)
    assert planned.status == "planned"
    assert MARKER in _everything_stored(world)

    world.store.forget(NS, ForgetSelection(ids=(m["up"],)), now=LATER, by="test")

    stored = world.store.db.records.get(planned.record_id)[0]  # type: ignore[arg-type]
    assert stored.status == "refused"
    assert stored.stats["refused_by"] == "forget"
    assert stored.stats["plan"]["changes"] == []
    assert MARKER not in _everything_stored(world)


def test_a_plan_naming_nothing_erased_stands(world: World) -> None:
    world.configure(jobs={"approval": "changes"})
    m = episode(world)
    fragments = [m["up"], m["top"], m["down"]]

    outcome = _run_racing_a_forget(world, m["breakfast"], fragments)  # not in the plan

    assert outcome.status == "planned"
    stored = world.store.db.records.get(outcome.record_id)[0]  # type: ignore[arg-type]
    assert stored.status == "planned"
    assert len(stored.stats["plan"]["changes"]) == 1


def test_a_run_applying_after_a_forget_writes_nothing_of_it(world: World) -> None:
    m = episode(world)  # no approval: the run applies its plan at once
    fragments = [m["up"], m["top"], m["down"]]

    outcome = _run_racing_a_forget(world, m["down"], fragments)

    assert outcome.status == "failed", outcome.message
    assert outcome.message == f"NotFound: memory {m['down']} does not exist"
    assert MARKER not in _everything_stored(world)
    assert [x for x in world.active() if x.type == "interaction_summary"] == []
