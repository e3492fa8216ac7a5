"""`secretary dream` and `secretary plans`, end to end on the embedded store."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from secretary import cli_jobs
from secretary.cli_common import Context, _Group
from secretary.cli_jobs import dream, plans
from secretary.config import load_settings
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import run_pending
from store.coordination.leases import Lease
from store.service import Store
from tests.secretary.jobs.conftest import NOW

Run = Callable[..., Result]
WAIT = 10.0


@click.group(cls=_Group)
@click.option("--data-dir", type=click.Path(path_type=Path))
@click.pass_context
def root(click_ctx: click.Context, data_dir: Path) -> None:
    """Test root: the lead registers these commands on `secretary` itself."""
    click_ctx.obj = Context(config=None, data_dir=data_dir)


root.add_command(dream)
root.add_command(plans)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("SECRETARY_CONFIG", "SECRETARY_DATA_DIR", "SECRETARY_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "data"


@pytest.fixture
def run(data_dir: Path) -> Run:
    def invoke(*args: str, code: int = 0) -> Result:
        result = CliRunner().invoke(root, ["--data-dir", str(data_dir), *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return invoke


def seed_duplicates(data_dir: Path) -> None:
    store = Store.open(load_settings(None, {}, data_dir=data_dir), create=True)
    try:
        fact = "The user is allergic to peanuts."
        store.add_memories(
            "maya",
            [
                {"content": fact, "type": "fact", "session_id": "a"},
                {"content": fact, "type": "fact", "session_id": "b"},
            ],
            now=NOW,
        )
    finally:
        store.close()


def test_dream_dry_run_prints_plan_and_writes_nothing(data_dir: Path, run: Run) -> None:
    seed_duplicates(data_dir)

    out = run("dream", "--job", "auditor", "--dry-run").output

    assert "maya auditor: planned: dry run" in out
    assert "set #2 merged (replaced by #1)" in out
    assert "maya auditor: planned" in run("dream", "--job", "auditor", "--dry-run").output


def test_dream_runs_jobs_and_reports_each(data_dir: Path, run: Run) -> None:
    seed_duplicates(data_dir)

    out = run("dream", "--namespace", "maya").output

    assert "maya extractor: skipped: LLM not configured" in out
    assert "maya auditor: applied" in out
    assert "maya retention: nothing" in out


def test_dream_without_namespaces_says_so(data_dir: Path, run: Run) -> None:
    Store.open(load_settings(None, {}, data_dir=data_dir), create=True).close()

    assert "no namespace has memories or logs yet" in run("dream").output


def test_plans_approve_flow(data_dir: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRETARY_JOBS_APPROVAL", "changes")
    seed_duplicates(data_dir)
    assert "planned (record #" in run("dream", "--job", "auditor").output
    (line,) = run("plans", "list").output.splitlines()
    record_id = line.split()[0].lstrip("#")

    shown = run("plans", "show", record_id).output
    approved = run("plans", "approve", record_id).output

    assert "merge exact duplicate #2 into #1" in shown
    assert "applied" in approved
    assert run("plans", "list").output.strip() == "no plans await approval"
    again = run("plans", "approve", record_id, code=1)
    assert "no pending plan" in again.output + (again.stderr or "")


def test_plans_reject(data_dir: Path, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRETARY_JOBS_APPROVAL", "all")
    seed_duplicates(data_dir)
    run("dream", "--job", "auditor")
    record_id = run("plans", "list").output.split()[0].lstrip("#")

    assert "rejected" in run("plans", "reject", record_id).output
    # The rejected merges are not proposed again; the audit by a model still waits for one.
    again = run("dream", "--job", "auditor").output
    assert again == "maya auditor: skipped: LLM not configured\n"


@pytest.mark.parametrize("command", [dream, plans, *plans.commands.values()])
def test_job_commands_have_help(command: click.Command) -> None:
    assert command.help


# -- with a daemon running: a request it runs --------------------------------------------------


DAEMON = "host:1:the-daemon"


@pytest.fixture
def daemon_lease(data_dir: Path) -> Iterator[Store]:
    """A store whose daemon lease is held (by the test, standing in for a daemon), with a
    memory in namespace maya (a dream on a namespace that holds nothing is refused)."""
    store = Store.open(load_settings(None, {}, data_dir=data_dir), create=True)
    store.add_memories("maya", [{"content": "Maya runs."}], now=NOW)
    lease = Lease(store.engine, holder=DAEMON, ttl=timedelta(minutes=5))
    lease.acquire()
    yield store
    lease.release()
    store.close()


def act_as_daemon(
    store: Store, run: Callable[[DreamRequestView], list[dict[str, Any]]]
) -> threading.Thread:
    """Claim the first request queued and run it with ``run``, as the daemon would."""

    def serve() -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if run_pending(store.db.dream_requests, picker=DAEMON, run=run):
                return
            time.sleep(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_dream_with_daemon_running_waits_for_its_outcomes(daemon_lease: Store, run: Run) -> None:
    seen: list[DreamRequestView] = []

    def daemon_run(request: DreamRequestView) -> list[dict[str, Any]]:
        seen.append(request)
        return [
            {
                "job": "auditor",
                "namespace": "maya",
                "status": "applied",
                "record_id": 7,
                "message": "1 change applied",
            },
        ]

    daemon = act_as_daemon(daemon_lease, daemon_run)
    result = run("dream", "--namespace", "maya", "--job", "auditor", "--retry-quarantined")
    daemon.join(WAIT)

    assert result.stdout.strip() == "maya auditor: applied (record #7): 1 change applied"
    assert f"the daemon ({DAEMON}) runs it; waiting" in result.stderr
    (request,) = seen
    assert (request.namespace, request.jobs, request.retry_quarantined) == (
        "maya",
        ("auditor",),
        True,
    )
    assert request.requested_by.startswith("cli:")


def test_dream_with_daemon_a_failed_outcome_exits_1(daemon_lease: Store, run: Run) -> None:
    def daemon_run(_: DreamRequestView) -> list[dict[str, Any]]:
        return [
            {
                "job": "linker",
                "namespace": "maya",
                "status": "failed",
                "record_id": 3,
                "message": "LlmError: boom",
            }
        ]

    daemon = act_as_daemon(daemon_lease, daemon_run)
    result = run("dream", code=1)
    daemon.join(WAIT)
    assert "maya linker: failed (record #3): LlmError: boom" in result.stdout


def test_dream_with_daemon_a_failed_request_says_why(daemon_lease: Store, run: Run) -> None:
    def daemon_run(_: DreamRequestView) -> list[dict[str, Any]]:
        raise RuntimeError("the database is gone")

    daemon = act_as_daemon(daemon_lease, daemon_run)
    result = run("dream", code=1)
    daemon.join(WAIT)
    assert "dream request #1 failed: RuntimeError: the database is gone" in result.stderr


def test_dream_no_wait_prints_the_request_id_and_queues_it(daemon_lease: Store, run: Run) -> None:
    result = run("dream", "--no-wait", "--job", "linker", "--job", "auditor")

    assert result.stdout.strip() == "1"
    assert f"queued for the daemon ({DAEMON})" in result.stderr
    request = daemon_lease.db.dream_requests.get(1)
    assert request is not None
    assert (request.status, request.namespace, request.jobs) == (
        "pending",
        None,
        ("linker", "auditor"),
    )


def test_dream_daemon_gone_while_waiting_exits_75(
    daemon_lease: Store, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("secretary.cli_jobs.WAIT_POLL_SECONDS", 0.01)
    stopped = threading.Event()

    def stop_the_daemon() -> None:
        while daemon_lease.db.dream_requests.get(1) is None:
            time.sleep(0.01)
        Lease(daemon_lease.engine, holder=DAEMON, ttl=timedelta(minutes=5)).release()
        stopped.set()

    threading.Thread(target=stop_the_daemon, daemon=True).start()
    result = run("dream", code=75)
    assert stopped.is_set()
    assert "the daemon stopped before dream request #1 was done" in result.stderr
    request = daemon_lease.db.dream_requests.get(1)
    assert request is not None
    assert request.status == "pending"  # the next daemon runs it


def test_dream_dry_run_with_daemon_runs_here(data_dir: Path, run: Run) -> None:
    seed_duplicates(data_dir)
    store = Store.open(load_settings(None, {}, data_dir=data_dir))
    try:
        with Lease(store.engine, holder=DAEMON, ttl=timedelta(minutes=5)):
            out = run("dream", "--job", "auditor", "--dry-run").output
        assert "maya auditor: planned: dry run" in out
        assert store.db.dream_requests.recent() == []
    finally:
        store.close()


def test_dream_without_daemon_runs_here_even_with_no_wait(data_dir: Path, run: Run) -> None:
    seed_duplicates(data_dir)
    out = run("dream", "--namespace", "maya", "--job", "auditor", "--no-wait").output
    assert "maya auditor: applied" in out


def test_dream_daemon_killed_on_this_host_runs_here(data_dir: Path, run: Run) -> None:
    seed_duplicates(data_dir)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store = Store.open(load_settings(None, {}, data_dir=data_dir))
    try:
        holder = f"{socket.gethostname()}:{gone.pid}:killed"
        with Lease(store.engine, holder=holder, ttl=timedelta(minutes=5)):
            out = run("dream", "--namespace", "maya", "--job", "auditor").output
        assert "maya auditor: applied" in out
        assert store.db.dream_requests.recent() == []
    finally:
        store.close()


def test_dream_outside_the_main_thread_runs_without_a_signal_handler(
    data_dir: Path, run: Run
) -> None:
    seed_duplicates(data_dir)
    results: list[Result] = []
    worker = threading.Thread(target=lambda: results.append(run("dream", "--job", "auditor")))
    worker.start()
    worker.join(WAIT * 3)
    assert "maya auditor: applied" in results[0].output


def test_dream_with_daemon_running_prints_each_outcome_as_the_daemon_stores_it(
    daemon_lease: Store, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed, before_the_end = threading.Event(), []
    shown = cli_jobs._stored_line

    def stored_line(outcome: Mapping[str, Any]) -> str:
        printed.set()
        return shown(outcome)

    monkeypatch.setattr(cli_jobs, "_stored_line", stored_line)
    first = {"job": "auditor", "namespace": "maya", "status": "nothing", "record_id": None}
    second = {"job": "linker", "namespace": "maya", "status": "nothing", "record_id": None}
    outcomes = [{**first, "message": "nothing to do"}, {**second, "message": "nothing to do"}]

    def daemon_run(request: DreamRequestView) -> list[dict[str, Any]]:
        daemon_lease.db.dream_requests.progress(request.id, picker=DAEMON, outcomes=outcomes[:1])
        # The command prints the first run's line before the dream ends.
        before_the_end.append(printed.wait(WAIT))
        return outcomes

    daemon = act_as_daemon(daemon_lease, daemon_run)
    result = run("dream", "--namespace", "maya", "--job", "auditor", "--job", "linker")
    daemon.join(WAIT)

    assert before_the_end == [True]
    assert result.stdout.splitlines() == [
        "maya auditor: nothing to do",
        "maya linker: nothing to do",
    ]
