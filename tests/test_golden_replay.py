"""A fixed script of ingests, dreams, approvals, refusals, failures, recalls, undos and a restore,
replayed against the scripted model; its export and records must equal a golden file.

The golden file (tests/golden/replay.json) was written by the code before the floor-plan
refactor (issue 8), so this test holds the refactor to "behaviour does not change". A change that
is meant to change behaviour regenerates it with ``SECRETARY_UPDATE_GOLDEN=1`` and says why in
its commit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from secretary.approval import approve_plan, reject_plan
from secretary.config import Settings
from secretary.jobs.settings import GuardrailSettings, JobsSettings
from secretary.runner import run_job
from store.ingest import ingest_file
from store.service import Store
from store.shapes.records import record_detail_json
from store.write.undo import AlreadyUndone, NothingToUndo, UndoConflict, undo
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer, ScriptedReply
from tests.helpers.scripted_model import ScriptedModel
from tests.secretary.jobs.conftest import llm_settings

GOLDEN = Path(__file__).parent / "golden" / "replay.json"
NS = "maya"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR, DAY, MINUTE = timedelta(hours=1), timedelta(days=1), timedelta(minutes=1)
CYCLE = ("extractor", "linker", "auditor", "soul_mapper", "consolidator", "retention")


@dataclass
class Replay:
    store: Store
    settings: Settings
    server: ScriptedOpenAIServer
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    def configure(self, **sections: dict[str, Any]) -> None:
        update: dict[str, Any] = {}
        if "jobs" in sections:
            update["jobs"] = JobsSettings(**(self.settings.jobs.model_dump() | sections["jobs"]))
        if "guardrails" in sections:
            merged = self.settings.guardrails.model_dump() | sections["guardrails"]
            update["guardrails"] = GuardrailSettings(**merged)
        self.settings = self.settings.model_copy(update=update)

    def add(self, items: list[dict[str, Any]], now: datetime) -> tuple[int, ...]:
        rows = [{**item, "timestamp": item["timestamp"].isoformat()} for item in items]
        return self.store.add_memories(NS, rows, now=now).ids

    def logs(self, lines: list[tuple[str, str, datetime]], now: datetime) -> None:
        rows = [
            {"session_id": "s1", "role": role, "content": text, "timestamp": at.isoformat()}
            for role, text, at in lines
        ]
        self.store.add_logs(NS, rows, now=now)

    def run(self, job: str, now: datetime) -> int | None:
        # Durations are measured; a clock that stands still keeps the records comparable.
        outcome = run_job(self.store, self.settings, job, NS, now=now, monotonic=lambda: 0.0)
        self.note(outcome)
        return outcome.record_id

    def note(self, outcome: Any) -> None:
        self.outcomes.append(
            {
                "job": outcome.job,
                "status": outcome.status,
                "record": outcome.record_id,
                "message": outcome.message,
                "stats": json.loads(json.dumps(outcome.stats, default=str)),
            }
        )

    def undo(self, record_id: int, now: datetime, *, force: bool = False) -> None:
        try:
            result = undo(self.store.db.writer, record_id, now=now, force=force)
        except (UndoConflict, NothingToUndo, AlreadyUndone) as exc:
            self.outcomes.append({"undo": record_id, "refused": str(exc)})
            return
        self.outcomes.append({"undo": record_id, "by": result.record_id})

    def last_record(self, job: str) -> int:
        return self.store.db.records.find(namespaces=[NS], job=job, limit=1)[0].id

    def snapshot(self) -> dict[str, Any]:
        db = self.store.db
        records = [
            record_detail_json(*db.records.get(record.id))
            for record in reversed(db.records.find(limit=100_000))
        ]
        return {
            "export": [json.loads(line) for line in db.memories.export(NS)],
            "records": records,
            "outcomes": self.outcomes,
        }


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[Replay]:
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, ScriptedModel())
        settings = Settings(data_dir=tmp_path / "a", llm=llm_settings(server))
        store = Store.open(settings, create=True, embedder=FakeEmbedder())
        try:
            yield Replay(store=store, settings=settings, server=server)
        finally:
            store.close()


def first_day(r: Replay) -> None:
    r.configure(jobs={"auditor_near_threshold": 0.75, "linker_threshold": 0.6})
    r.add(
        [
            {"content": "The user lives in Paris.", "type": "fact", "timestamp": T0 - 10 * DAY},
            {"content": "The user lives in Lyon.", "type": "fact", "timestamp": T0 - DAY},
            {
                "content": "The user is allergic to peanuts.",
                "type": "fact",
                "session_id": "a",
                "timestamp": T0 - 5 * DAY,
                "external_id": "allergy-a",
            },
            {
                "content": "The user is allergic to peanuts.",
                "type": "fact",
                "session_id": "b",
                "timestamp": T0 - 4 * DAY,
                "external_id": "allergy-b",
            },
            {"content": "Breakfast with Anna at the bakery.", "timestamp": T0 - 3 * DAY},
            {"content": "Maya went hiking in the Alps with Tom.", "timestamp": T0 - 2 * DAY},
            {
                "content": "Maya and Tom reached the Alps summit hiking.",
                "timestamp": T0 - 2 * DAY + 20 * MINUTE,
            },
            {
                "content": "Maya paid her electricity bill.",
                "timestamp": T0 - 2 * DAY + 30 * MINUTE,
                "importance": 9,
            },
            {
                "content": "Maya and Tom hiking down the Alps.",
                "timestamp": T0 - 2 * DAY + 40 * MINUTE,
                "tags": ["alps"],
            },
            {
                "content": "Maya keeps her passport in the blue drawer.",
                "type": "fact",
                "timestamp": T0 - 6 * DAY,
                "pinned": True,
                "metadata": {"room": "hall"},
            },
        ],
        T0 - HOUR,
    )
    r.logs(
        [
            ("user", "I finally adopted a cat yesterday, her name is Miso.", T0 - 3 * HOUR),
            ("assistant", "Congratulations! How is Miso settling in?", T0 - 3 * HOUR + MINUTE),
            ("user", "Please always answer me in French from now on.", T0 - 2 * HOUR),
        ],
        T0 - HOUR,
    )
    for job in CYCLE:
        r.run(job, T0)
    r.store.indexer.sync()


def approvals_and_refusals(r: Replay) -> None:
    t1 = T0 + DAY
    r.add([{"content": "Maya went running by the lake.", "timestamp": t1 - HOUR}], t1)
    r.run("soul_mapper", t1)  # revises the trait
    r.configure(jobs={"approval": "changes"})
    r.add(
        [
            {
                "content": "Maya likes green tea.",
                "type": "preference",
                "timestamp": t1,
                "session_id": "x",
            },
            {
                "content": "Maya likes green tea.",
                "type": "preference",
                "timestamp": t1,
                "session_id": "y",
            },
        ],
        t1,
    )
    planned = r.run("auditor", t1)
    assert planned is not None
    r.note(approve_plan(r.store, r.settings, planned, now=t1 + HOUR))
    r.add(
        [
            {
                "content": "Maya likes black coffee.",
                "type": "preference",
                "timestamp": t1,
                "session_id": "x",
            },
            {
                "content": "Maya likes black coffee.",
                "type": "preference",
                "timestamp": t1,
                "session_id": "y",
            },
        ],
        t1 + HOUR,
    )
    planned = r.run("auditor", t1 + 2 * HOUR)
    assert planned is not None
    r.note(reject_plan(r.store, planned, now=t1 + 2 * HOUR))
    r.configure(jobs={"approval": "off"}, guardrails={"max_changes_per_run": 1})
    r.add(
        [
            {
                "content": "Maya owns a red bicycle.",
                "type": "fact",
                "timestamp": t1,
                "session_id": f"bike-{n}",
            }
            for n in range(3)
        ],
        t1 + 3 * HOUR,
    )
    # Two merges of exact duplicates: the cap does not hold them back, it bounds each record.
    r.run("auditor", t1 + 3 * HOUR)
    r.configure(guardrails={"max_changes_per_run": 200})
    r.run("auditor", t1 + 3 * HOUR)
    r.server.enqueue(
        CHAT_COMPLETIONS, ScriptedReply(body=_chat("not json")), ScriptedReply(body=_chat("{}"))
    )
    r.add([{"content": "Maya fixed the bicycle chain.", "timestamp": t1 + HOUR}], t1 + 4 * HOUR)
    r.run("soul_mapper", t1 + 4 * HOUR)  # an invalid reply, then an invalid repair: failed
    r.run("extractor", t1 + 4 * HOUR)  # nothing new
    r.store.indexer.sync()


def recalls_and_undos(r: Replay) -> None:
    t2 = T0 + 2 * DAY
    paris_and_hiking = [1, 6, 9]
    r.store.db.writer.reinforce(dict.fromkeys(paris_and_hiking, 1), now=t2, step=0.1, max_boost=2.0)
    consolidation = r.last_record("consolidator")
    r.undo(consolidation, t2)  # later changes refer to the summary: a conflict
    r.undo(consolidation, t2 + MINUTE, force=True)
    r.undo(r.last_record("undo"), t2 + 2 * MINUTE)  # the undo undone
    r.undo(r.last_record("extractor"), t2 + 2 * MINUTE)
    auditor_first = r.store.db.records.find(namespaces=[NS], job="auditor", limit=100)[-1]
    r.add([{"content": "Maya moved to Lyon in February.", "timestamp": t2}], t2)
    r.store.db.writer.reinforce({2: 3}, now=t2, step=0.1, max_boost=2.0)
    r.undo(auditor_first.id, t2 + 3 * MINUTE)
    r.run("auditor", t2 + 4 * MINUTE)
    r.undo(r.last_record("auditor"), t2 + 5 * MINUTE, force=True)
    r.store.indexer.sync()


def retention_and_restore(r: Replay, tmp_path: Path) -> dict[str, Any]:
    t3 = T0 + 40 * DAY
    r.run("retention", t3)
    r.run("retention", t3)  # nothing left
    dump = tmp_path / "export.jsonl"
    dump.write_text("".join(line + "\n" for line in r.store.db.memories.export(NS)))
    other = Store.open(
        r.settings.model_copy(update={"data_dir": tmp_path / "b"}),
        create=True,
        embedder=FakeEmbedder(),
    )
    try:
        report = ingest_file(other, dump, namespace=NS, now=t3)
        again = ingest_file(other, dump, namespace=NS, now=t3 + HOUR)
        assert list(other.db.memories.export(NS)) == list(r.store.db.memories.export(NS))
        restore_records = [
            record_detail_json(*other.db.records.get(record.id))
            for record in reversed(other.db.records.find(limit=100))
        ]
    finally:
        other.close()
    return {
        "restore": {"created": report.created, "skipped": again.skipped},
        "restore_records": restore_records,
    }


def _chat(text: str) -> dict[str, Any]:
    from tests.helpers.openai_server import chat_completion_body

    body = chat_completion_body(text, prompt_tokens=10, completion_tokens=3)
    body["created"] = 0
    return body


def test_replay_matches_golden_export_and_records(replay: Replay, tmp_path: Path) -> None:
    first_day(replay)
    approvals_and_refusals(replay)
    recalls_and_undos(replay)
    restored = retention_and_restore(replay, tmp_path)
    got = {**replay.snapshot(), **restored}
    text = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("SECRETARY_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    expected = GOLDEN.read_text(encoding="utf-8")
    assert json.loads(text) == json.loads(expected)
    assert text == expected  # byte-identical, key order and all
