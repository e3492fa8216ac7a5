"""Crash safety: a process SIGKILLed at points inside a run leaves no partial record, the index
catches up, and running again converges on what an uninterrupted run leaves.

Each crash is real: a child process (tests/helpers/crash_child.py) runs the action on a store in
tmp_path (SQLite, embedded Chroma, the LLM on a scripted server) and SIGKILLs itself where the
test says, by wrapping an internal function for its own life only. The parent then reads the
store as a restarted daemon would: the state must be exactly the one before the action or the
one after it (or, for an ingest, after a whole number of its transactions); every memory row
must be what the last operation on it left; the outbox must bring the index level with SQL.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select

from secretary.config import Settings
from secretary.jobs.registry import JOB_NAMES
from secretary.jobs.settings import JobsSettings
from secretary.scheduler import ScheduleBook
from store.clock import utc_now
from store.coordination.leases import current_lease
from store.coordination.schedules import ScheduleTable
from store.db import make_engine, session_factory
from store.images import memory_image
from store.models import JobState, MaintenanceOperation, MaintenanceRecord, Memory
from store.operations import CreateRelation
from store.service import Store
from store.settings import IngestSettings
from store.write.undo_conflicts import strip_recall
from tests.helpers.crash_child import PRELOAD, KillPoint, Task, main
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.openai_server import (
    CHAT_COMPLETIONS,
    ReceivedRequest,
    ScriptedOpenAIServer,
    ScriptedReply,
    chat_reply,
)
from tests.secretary.jobs.conftest import llm_settings
from tests.secretary.test_daemon import REPO, SCRIPT, START, free_port

NS = "maya"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
HOUR = timedelta(hours=1)
KILLED = -signal.SIGKILL
CHILD_SECONDS = 60.0  # the bound on one child; each takes well under a second once forked


# -- the store as a restarted daemon sees it ---------------------------------------------------


@dataclass(frozen=True)
class State:
    """Everything a run may change: the namespace's rows, its records and the jobs' states."""

    export: tuple[str, ...]
    records: tuple[tuple[Any, ...], ...]
    job_states: tuple[tuple[str, str], ...]


def state_of(store: Store) -> State:
    db = store.db
    records = []
    for record in sorted(db.records.find(namespaces=[NS], limit=10_000), key=lambda r: r.id):
        _, operations = db.records.get(record.id)
        records.append(
            (
                record.id,
                record.job,
                record.status,
                len(operations),
                record.undone_by_id,
                record.undoes_id,
                record.tokens_in,
                json.dumps(record.stats, sort_keys=True),
            )
        )
    with session_factory(db.engine)() as session:
        rows = session.scalars(select(JobState).where(JobState.namespace == NS))
        job_states = sorted((row.job, json.dumps(row.state, sort_keys=True)) for row in rows)
    return State(
        export=tuple(db.memories.export(NS)), records=tuple(records), job_states=tuple(job_states)
    )


def timeless(state: State) -> State:
    """The state without the times a real clock wrote (a daemon runs at the wall clock's now)."""
    export = []
    for line in state.export:
        row = json.loads(line)
        for name in ("created_at", "updated_at", "last_accessed"):
            row.pop(name, None)
        export.append(json.dumps(row, sort_keys=True))
    return State(export=tuple(export), records=state.records, job_states=state.job_states)


def unexplained(store: Store) -> list[int]:
    """Memories whose row is not what the last recorded operation on them left."""
    left: dict[int, dict[str, Any] | None] = {}
    with session_factory(store.db.engine)() as session:
        operations = session.scalars(
            select(MaintenanceOperation)
            .join(MaintenanceRecord, MaintenanceRecord.id == MaintenanceOperation.record_id)
            .where(MaintenanceRecord.namespace == NS, MaintenanceOperation.target_kind == "memory")
            .order_by(MaintenanceOperation.record_id, MaintenanceOperation.seq)
        )
        for operation in operations:
            left[operation.target_id] = operation.after
        rows = {m.id: m for m in session.scalars(select(Memory).where(Memory.namespace == NS))}
        wrong = [
            memory_id
            for memory_id, row in rows.items()
            if left.get(memory_id) is None
            or strip_recall(left[memory_id] or {}) != strip_recall(memory_image(row))
        ]
    vanished = [i for i, image in left.items() if image is not None and i not in rows]
    return sorted(wrong + vanished)


@contextmanager
def opened(settings: Settings) -> Iterator[Store]:
    store = Store.open(settings, create=True, embedder=FakeEmbedder())
    try:
        yield store
    finally:
        store.close()


def read_state(settings: Settings) -> State:
    with opened(settings) as store:
        assert unexplained(store) == []
        return state_of(store)


def outbox_size(settings: Settings) -> int:
    with opened(settings) as store:
        return store.db.work.outbox_size()


def restart(settings: Settings) -> None:
    """What a restarted daemon does first: apply the outbox; then the index must match SQL."""
    with opened(settings) as store:
        store.indexer.sync()
        drift = store.indexer.verify(NS)
        assert drift.clean, drift
        assert store.db.work.outbox_size() == 0


# -- children ---------------------------------------------------------------------------------


@dataclass
class Lab:
    """Children forked from a server that preloaded the heavy imports; stores in ``root``."""

    forks: ForkServerContext
    server: ScriptedOpenAIServer
    root: Path
    made: int = 0

    def settings(self, name: str, **jobs: Any) -> Settings:
        return Settings(
            data_dir=self.root / name,
            llm=llm_settings(self.server),
            jobs=JobsSettings(**jobs),
            # Small transactions and index batches, so that a kill can land between two.
            ingest=IngestSettings(commit_every=2),
            index=Settings().index.model_copy(update={"batch_size": 2}),
        )

    def copy(self, settings: Settings, name: str) -> Settings:
        self.made += 1
        target = self.root / f"{name}-{self.made}"
        shutil.copytree(settings.data_dir, target)
        return settings.model_copy(update={"data_dir": target})

    def run(self, task: Task) -> None:
        """Run the task in a child; it must die by SIGKILL if it has a kill point, else end well."""
        child = self.forks.Process(target=main, args=(task,), name=f"crash-{task.action}")
        child.start()
        child.join(CHILD_SECONDS)
        if child.is_alive():
            child.kill()
            child.join()
            raise AssertionError(f"the child did not end within {CHILD_SECONDS} s")
        log = task.settings.data_dir / "child.log"
        assert child.exitcode == (KILLED if task.kill_at else 0), (
            log.read_text() if log.exists() else "no log"
        )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    forks = multiprocessing.get_context("forkserver")
    # The server imports litellm and Chroma once; every child is forked from it.
    forks.set_forkserver_preload(list(PRELOAD))
    with ScriptedOpenAIServer() as server:
        yield Lab(forks=forks, server=server, root=tmp_path_factory.mktemp("crash"))


def answer_with(server: ScriptedOpenAIServer, document: Mapping[str, Any]) -> None:
    """Every chat call gets this reply: a crashed run and its re-run hear the same."""
    server.set_default(CHAT_COMPLETIONS, chat_reply(json.dumps(document), prompt_tokens=10))


@dataclass(frozen=True)
class Scene:
    """A seeded store, an action on it, and the states before and after an uninterrupted run."""

    seeded: Settings
    act: Callable[[Settings], Task]
    before: State
    after: State
    reference: Settings  # the store after the uninterrupted run, its index in step
    target: int | None = None  # the record the action undoes or approves


def scene(
    lab: Lab, seeded: Settings, act: Callable[[Settings], Task], target: int | None = None
) -> Scene:
    reference = lab.copy(seeded, "reference")
    lab.run(act(reference))
    restart(reference)
    before, after = read_state(seeded), read_state(reference)
    assert before != after
    return Scene(
        seeded=seeded, act=act, before=before, after=after, reference=reference, target=target
    )


def crash_and_recover(
    lab: Lab, scene: Scene, *, kill_at: KillPoint, hit: int, expect: str, rerun: bool = True
) -> State:
    """Kill the action at the point; the store must then be in the ``expect`` state.

    Recover as a restarted daemon would (sync the outbox), run the action again if it did not
    commit (or always, if ``rerun``: it must then change nothing more), and check that the
    store converged on the uninterrupted run's state. Return the state the kill left.
    """
    crashed = lab.copy(scene.seeded, "crashed")
    lab.run(replace(scene.act(crashed), kill_at=kill_at, hit=hit))

    found = read_state(crashed)
    assert found == {"before": scene.before, "after": scene.after}[expect]
    restart(crashed)
    if rerun or found == scene.before:
        lab.run(scene.act(crashed))
        restart(crashed)
    assert read_state(crashed) == scene.after
    return found


# -- a job run ---------------------------------------------------------------------------------

EXTRACTED = {
    "memories": [
        {
            "content": "The user adopted a cat named Miso.",
            "type": "event",
            "importance": 6,
            "tags": ["cat", "pets", "miso"],
            "source_log_ids": [1, 2],
        },
        {
            "content": "The user wants answers in French.",
            "type": "preference",
            "importance": 7,
            "tags": ["language", "french", "answers"],
            "source_log_ids": [3],
        },
    ]
}


def seed_logs(lab: Lab, name: str, *, memories: bool = False) -> Settings:
    """Three log lines to extract from (and, with ``memories``, memories around their times)."""
    settings = lab.settings(name)
    with opened(settings) as store:
        if memories:  # the extracted ones land between these on the timeline
            store.add_memories(
                NS,
                [
                    {"content": f"Older memory {n}.", "timestamp": (NOW - t * HOUR).isoformat()}
                    for n, t in enumerate((9, 5, 2, 1))
                ],
                now=NOW - 10 * HOUR,
            )
            store.indexer.sync()
        lines = [
            ("user", "I adopted a cat yesterday, her name is Miso.", NOW - 6 * HOUR),
            ("assistant", "How is Miso settling in?", NOW - 6 * HOUR + timedelta(minutes=5)),
            ("user", "Please always answer me in French.", NOW - 3 * HOUR),
        ]
        store.add_logs(
            NS,
            [
                {
                    "session_id": "s1",
                    "role": role,
                    "content": text,
                    "timestamp": at.isoformat(),
                    "idempotency_key": f"s1-{index}",
                }
                for index, (role, text, at) in enumerate(lines)
            ],
            now=NOW - 10 * HOUR,
        )
    return settings


def extract(settings: Settings) -> Task:
    return Task(settings=settings, action="dream", job="extractor", namespace=NS, now=NOW)


@pytest.fixture(scope="module")
def extraction(lab: Lab) -> Scene:
    answer_with(lab.server, EXTRACTED)
    return scene(lab, seed_logs(lab, "extraction", memories=True), extract)


@pytest.mark.parametrize(
    ("kill_at", "hit", "expect"),
    [
        ("planned", 1, "before"),  # the LLM answered; nothing written
        ("flushed", 1, "before"),  # operations flushed, not committed
        ("committed", 1, "after"),  # committed; the index has not seen it
        ("mid-upsert", 1, "after"),  # Chroma got half of a batch of vectors
        ("before-ack", 1, "after"),  # Chroma got a batch; its outbox entries are still there
    ],
)
def test_crash_in_a_job_run_leaves_before_or_after_and_rerun_converges(
    lab: Lab, extraction: Scene, kill_at: KillPoint, hit: int, expect: str
) -> None:
    answer_with(lab.server, EXTRACTED)

    crash_and_recover(lab, extraction, kill_at=kill_at, hit=hit, expect=expect)

    new = [r for r in extraction.after.records if r not in extraction.before.records]
    assert [(r[1], r[2], r[6]) for r in new] == [("extractor", "applied", 10)]
    assert new[0][3] > 2  # two memories created and their timeline neighbours relinked


def test_crash_in_a_run_that_changed_nothing_keeps_watermark_and_record_together(
    lab: Lab,
) -> None:
    # The LLM finds nothing worth keeping: the run spent tokens and moved its watermark.
    answer_with(lab.server, {"memories": []})
    quiet = scene(lab, seed_logs(lab, "quiet", memories=True), extract)

    crash_and_recover(lab, quiet, kill_at="committed", hit=1, expect="after")

    (new,) = [r for r in quiet.after.records if r not in quiet.before.records]
    assert (new[1], new[2], new[3], new[6]) == ("extractor", "applied", 0, 10)
    assert ("extractor", json.dumps({"watermark": 3})) in quiet.after.job_states


# -- an ingest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ingestion:
    seeded: Settings
    path: Path
    states: list[State]  # after each whole transaction, the first one before any


@pytest.fixture(scope="module")
def ingestion(lab: Lab) -> Ingestion:
    from store.ingest import ingest_file

    seeded = lab.settings("ingestion")
    with opened(seeded):
        pass  # an empty store at the newest schema
    # Out of time order, so that later transactions relink memories of earlier ones.
    lines = [
        json.dumps({"content": f"Ingested memory {n}.", "timestamp": (NOW - h * HOUR).isoformat()})
        + "\n"
        for n, h in enumerate([7, 3, 9, 1, 5, 8, 2])
    ]
    path = lab.root / "memories.jsonl"
    path.write_text("".join(lines))
    prefixes = lab.copy(seeded, "prefixes")
    states = [read_state(prefixes)]
    with opened(prefixes) as store:
        for end in range(2, len(lines) + 2, 2):  # commit_every=2
            part = lab.root / f"part-{end}.jsonl"
            part.write_text("".join(lines[:end]))
            ingest_file(store, part, namespace=NS, now=NOW)
            states.append(state_of(store))
    reference = lab.copy(seeded, "reference")
    lab.run(Task(settings=reference, action="ingest", namespace=NS, now=NOW, path=path))
    assert read_state(reference) == states[-1]
    return Ingestion(seeded=seeded, path=path, states=states)


@pytest.mark.parametrize(
    ("kill_at", "hit", "whole"),
    [
        ("committed", 2, 2),  # between the second and third transactions
        ("flushed", 3, 2),  # inside the third, its rows flushed
        ("before-ack", 2, 4),  # the index has two batches, the outbox lists the second still
    ],
)
def test_crash_in_an_ingest_keeps_whole_transactions_and_reingest_finishes(
    lab: Lab, ingestion: Ingestion, kill_at: KillPoint, hit: int, whole: int
) -> None:
    crashed = lab.copy(ingestion.seeded, "crashed")
    ingest = Task(settings=crashed, action="ingest", namespace=NS, now=NOW, path=ingestion.path)

    lab.run(replace(ingest, kill_at=kill_at, hit=hit))

    assert read_state(crashed) == ingestion.states[whole]
    restart(crashed)
    lab.run(ingest)
    restart(crashed)
    assert read_state(crashed) == ingestion.states[-1]


# -- undo and approval -------------------------------------------------------------------------


def record_of(settings: Settings, job: str, status: str) -> int:
    with opened(settings) as store:
        (record_id,) = [
            r.id
            for r in store.db.records.find(namespaces=[NS], limit=100)
            if (r.job, r.status) == (job, status)
        ]
    return record_id


@pytest.fixture(scope="module")
def undoing(lab: Lab, extraction: Scene) -> Scene:
    record_id = record_of(extraction.reference, "extractor", "applied")

    def act(settings: Settings) -> Task:
        return Task(settings=settings, action="undo", namespace=NS, now=LATER, record_id=record_id)

    return scene(lab, lab.copy(extraction.reference, "extracted"), act, record_id)


@pytest.mark.parametrize(("kill_at", "expect"), [("flushed", "before"), ("committed", "after")])
def test_crash_in_an_undo_leaves_before_or_after(
    lab: Lab, extraction: Scene, undoing: Scene, kill_at: KillPoint, expect: str
) -> None:
    # A committed undo is done: undoing the record again is refused, so no re-run then.
    found = crash_and_recover(lab, undoing, kill_at=kill_at, hit=1, expect=expect, rerun=False)

    status = "applied" if expect == "before" else "undone"
    assert [r[2] for r in found.records if r[0] == undoing.target] == [status]
    # Undo writes the rows back as they were, versions included.
    assert undoing.after.export == extraction.before.export


@pytest.fixture(scope="module")
def approving(lab: Lab) -> Scene:
    seeded = lab.settings("approval", approval="changes")
    with opened(seeded) as store:
        _, other = store.add_memories(
            NS,
            [
                {"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "a"},
                {"content": "Maya paid her electricity bill.", "type": "event"},
            ],
            now=NOW - HOUR,
        ).ids
        (twin,) = store.add_memories(
            NS,
            [{"content": "The user is allergic to peanuts.", "type": "fact", "session_id": "b"}],
            now=NOW - HOUR,
        ).ids
        relation = CreateRelation(source=twin, target=other, type="causal", strength=0.7)
        store.db.writer.apply(NS, "t", [relation], now=NOW)
        store.indexer.sync()
    lab.run(Task(settings=seeded, action="dream", job="auditor", namespace=NS, now=NOW))
    plan_id = record_of(seeded, "auditor", "planned")

    def act(settings: Settings) -> Task:
        return Task(settings=settings, action="approve", namespace=NS, now=LATER, record_id=plan_id)

    return scene(lab, seeded, act, plan_id)


@pytest.mark.parametrize(("kill_at", "expect"), [("flushed", "before"), ("committed", "after")])
def test_crash_in_an_approval_applies_and_settles_the_plan_together(
    lab: Lab, approving: Scene, kill_at: KillPoint, expect: str
) -> None:
    # An approved plan is no longer pending: approving it again is refused, so no re-run then.
    found = crash_and_recover(lab, approving, kill_at=kill_at, hit=1, expect=expect, rerun=False)

    status = "planned" if expect == "before" else "applied"
    assert [r[2] for r in found.records if r[0] == approving.target] == [status]
    merged = [line for line in approving.after.export if '"status":"merged"' in line]
    assert len(merged) == 1  # the twin, merged into the keeper


# -- the real daemon ---------------------------------------------------------------------------

LEASE_SECONDS = 5.0  # the shortest the config allows: a dead daemon's lease goes this soon


# The daemon embeds with the fake embedder, as every other writer of these stores does: a vector
# collection records the embedder that made it, and the checks open the store with the fake one
# (a daemon that indexed before it was stopped left a collection they could not open).
DAEMON_SCRIPT = (
    "import store.service\n"
    "from tests.helpers.fake_embedder import FakeEmbedder\n"
    "store.service.make_embedder = lambda **_: FakeEmbedder()\n"
) + SCRIPT


class Daemon:
    """`secretary run` in a child process, configured through the environment."""

    def __init__(self, data_dir: Path, server: ScriptedOpenAIServer, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SECRETARY_", "NOTIFY_"))}
        env |= {
            "SECRETARY_DATA_DIR": str(data_dir),
            "SECRETARY_API_PORT": str(free_port()),
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
            "SECRETARY_SCHEDULE_TIMEZONE": "UTC",
            "SECRETARY_SCHEDULE_LEASE_SECONDS": str(LEASE_SECONDS),
            "ANONYMIZED_TELEMETRY": "False",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # Only the database's schedule (set by the test) fires anything.
            **{f"SECRETARY_SCHEDULE_{job.upper()}": "" for job in JOB_NAMES},
        }
        self.url = f"http://127.0.0.1:{env['SECRETARY_API_PORT']}"
        self.log = log
        self._stderr = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-c", DAEMON_SCRIPT, "run"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def healthy(self) -> bool:
        """Wait until the API answers (True) or the process exits (False), bounded."""
        deadline = time.monotonic() + START
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return True
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.2)
        self.close()
        raise AssertionError(f"neither healthy nor gone within {START} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(CHILD_SECONDS)
        self._stderr.close()


def restarted(engine: Engine, data_dir: Path, server: ScriptedOpenAIServer, log: Path) -> Daemon:
    """Start a daemon at once, as systemd's Restart= would; while the dead daemon's lease holds
    it must exit 75, and once the lease expired (within its length) a new one must start.
    """
    daemon = Daemon(data_dir, server, log)
    if daemon.healthy():
        return daemon
    assert daemon.process.returncode == 75, daemon.output()
    assert "another secretary daemon is already running" in daemon.output()
    daemon.close()
    lease = current_lease(engine)
    assert lease is not None  # the killed daemon could not release it
    left = (lease.expires_at - utc_now()).total_seconds()
    assert left <= LEASE_SECONDS
    time.sleep(max(0.0, left))  # a real process's lease: real time has to pass
    daemon = Daemon(data_dir, server, log.with_suffix(".again.log"))
    assert daemon.healthy(), daemon.output()
    return daemon


@pytest.mark.slow
def test_daemon_killed_mid_run_restarts_cleanly_and_loses_nothing(lab: Lab) -> None:
    answer_with(lab.server, EXTRACTED)
    seeded = seed_logs(lab, "daemon")
    reference = scene(lab, seeded, extract)  # what one uninterrupted run leaves
    engine = make_engine(seeded.database_url)
    # A daily run two minutes ago that no daemon made: the daemon catches it up as it starts.
    now = utc_now().replace(second=0, microsecond=0)
    due = now - timedelta(minutes=2)
    book = ScheduleBook(ScheduleTable(engine))
    book.set_cron("extractor", f"{due.minute} {due.hour} * * *", now=now)
    book.table.mark_fired("extractor", now=due - timedelta(minutes=1))
    asked, release = threading.Event(), threading.Event()

    def held(_request: ReceivedRequest) -> ScriptedReply:
        asked.set()  # the run is in its LLM call: the daemon dies now
        release.wait(CHILD_SECONDS)
        return chat_reply(json.dumps(EXTRACTED), prompt_tokens=10)

    lab.server.set_default(CHAT_COMPLETIONS, held)
    first = Daemon(seeded.data_dir, lab.server, lab.root / "first.log")
    second: Daemon | None = None
    try:
        assert asked.wait(START), first.output()
        first.process.kill()
        assert first.process.wait(CHILD_SECONDS) == KILLED
        release.set()
        assert read_state(seeded) == reference.before  # nothing of the run was written

        answer_with(lab.server, EXTRACTED)
        second = restarted(engine, seeded.data_dir, lab.server, lab.root / "second.log")
        lease = current_lease(engine)
        assert lease is not None
        assert lease.holder.split(":")[1] == str(second.process.pid)  # it took the lease over
        # The firing that was cut short counts as not done: the restarted daemon runs it at
        # once, within the misfire grace, instead of waiting for tomorrow's.
        # Its index worker then brings the vector index current (within a second or so).
        done = timeless(reference.after)
        deadline = time.monotonic() + CHILD_SECONDS
        while (
            timeless(read_state(seeded)) != done or outbox_size(seeded)
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert outbox_size(seeded) == 0, second.output()
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(CHILD_SECONDS) == 0, second.output()
        assert "its last firing was cut short" in second.output()
    finally:
        release.set()
        first.close()
        if second is not None:
            second.close()
        engine.dispose()
    assert timeless(read_state(seeded)) == timeless(reference.after)

    # Nothing is done twice: another run finds nothing new.
    lab.run(extract(seeded))
    restart(seeded)
    assert timeless(read_state(seeded)) == timeless(reference.after)
