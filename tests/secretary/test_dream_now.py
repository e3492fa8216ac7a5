"""Dream now, as real processes: `secretary dream` (waiting, or --no-wait) and POST /v1/dream
against a running `secretary run`; Ctrl-C ending `secretary dream` with one line.

Every wait on another process is bounded; the daemon polls for requests every 0.2 s here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from secretary.cli_jobs import dream_exit_code
from secretary.config import load_settings
from store.clock import utc_now
from store.coordination.leases import Lease, current_lease
from store.kinds import Outcome
from store.service import Store
from store.write.record_info import RecordInfo
from tests.helpers.cli import cli_in
from tests.helpers.fake_embedder import FakeEmbedder
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer, ScriptedReply
from tests.secretary.test_daemon import START, WAIT, DaemonProcess, free_port

REPO = Path(__file__).resolve().parents[2]
CLI = "from secretary.cli import main\nmain()\n"
FACT = "The user is allergic to peanuts."
FAST = {"SECRETARY_SCHEDULE_POLL_SECONDS": "0.2"}
pytestmark = pytest.mark.slow


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECRETARY_", "NOTIFY_"))}
    return env | {
        "SECRETARY_DATA_DIR": str(data_dir),
        "ANONYMIZED_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **extra,
    }


def secretary(data_dir: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        cwd=REPO,
        env=base_env(data_dir, **env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = START) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{out}\n{err}") from None
    return process.returncode, out, err


def until(condition: Callable[[], Any], what: str, timeout: float = START) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The store the processes share, with two exact duplicates in "maya" (no model needed)."""
    opened = Store.open(
        load_settings(None, {}, data_dir=tmp_path / "data"), create=True, embedder=FakeEmbedder()
    )
    opened.add_memories(
        "maya",
        [
            {"content": FACT, "type": "fact", "session_id": "a"},
            {"content": FACT, "type": "fact", "session_id": "b"},
        ],
        now=utc_now(),
    )
    yield opened
    opened.close()


@pytest.fixture
def daemon(store: Store, tmp_path: Path) -> Iterator[DaemonProcess]:
    process = DaemonProcess(
        store.settings.data_dir, free_port(), tmp_path / "daemon.log", None, extra_env=FAST
    )
    try:
        url = f"http://127.0.0.1:{process.port}/healthz"
        until(lambda: _healthy(url, process), "healthy daemon")
        yield process
        process.process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, process.output()
    finally:
        process.close()


def _healthy(url: str, process: DaemonProcess) -> bool:
    if process.process.poll() is not None:
        raise AssertionError(f"the daemon exited:\n{process.output()}")
    try:
        return httpx.get(url, timeout=WAIT).status_code == 200
    except httpx.TransportError:
        return False


def test_dream_now_against_a_running_daemon_prints_the_daemons_outcomes(
    store: Store, daemon: DaemonProcess
) -> None:
    holder = current_lease(store.engine).holder  # type: ignore[union-attr]

    code, out, err = finish(
        secretary(store.settings.data_dir, "dream", "--namespace", "maya", "--job", "auditor")
    )

    assert code == 0, err
    assert out.startswith("maya auditor: applied (record #"), out
    assert f"dream request #1: the daemon ({holder}) runs it; waiting" in err
    request = store.db.dream_requests.get(1)
    assert request is not None
    assert (request.status, request.picked_by) == ("done", holder)
    assert store.db.memories.count("maya") == 1  # the daemon merged the duplicate
    assert "dream request #1 (cli:" in daemon.output()


def test_dream_no_wait_and_post_dream_are_run_by_the_daemon(
    store: Store, daemon: DaemonProcess
) -> None:
    api = f"http://127.0.0.1:{daemon.port}"

    code, out, err = finish(secretary(store.settings.data_dir, "dream", "--no-wait"))
    assert code == 0, err
    request_id = int(out.strip())
    first = until(lambda: _finished(f"{api}/v1/dream/{request_id}"), "finished request")
    assert first["status"] == "done"
    assert {(o["namespace"], o["job"]) for o in first["outcomes"]} >= {("maya", "auditor")}

    accepted = httpx.post(f"{api}/v1/dream?namespace=maya", json={"jobs": ["linker"]}, timeout=WAIT)
    assert accepted.status_code == 202
    assert accepted.json()["daemon_running"] is True
    assert accepted.json()["note"] is None  # the daemon runs it, with its own configuration
    second = until(lambda: _finished(f"{api}/v1/dream/{accepted.json()['id']}"), "request")
    assert [(o["namespace"], o["job"]) for o in second["outcomes"]] == [("maya", "linker")]


# -- exit codes --------------------------------------------------------------------------------


def back_off(store: Store, job: str, namespace: str = "maya") -> None:
    """Leave ``job`` backing off on ``namespace`` for an hour, as a failed run does."""
    now = utc_now()
    store.db.writer.apply(
        namespace,
        job,
        (),
        now=now,
        info=RecordInfo(outcome=Outcome.FAILED, error="boom"),
        health={
            "last": {"status": "failed", "at": now.isoformat(), "record": None, "message": "boom"},
            "failures": 1,
            "backoff_until": (now + timedelta(hours=1)).isoformat(),
        },
    )


def test_dream_a_job_backing_off_runs_now_and_says_it_overrode_the_back_off(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    back_off(store, "auditor")
    run = cli_in(store.settings.data_dir, monkeypatch)

    result = run("dream", "--namespace", "maya", "--job", "auditor", "--job", "retention")

    lines = [line for line in result.stdout.splitlines() if line.startswith("maya ")]
    assert lines[0].startswith("maya auditor: applied (record #"), lines
    assert ": ran now, overriding the back-off after 1 failed run until " in lines[0]
    assert lines[1] == "maya retention: nothing to do"
    assert store.db.memories.count("maya") == 1  # the auditor ran: the duplicate is merged
    assert "failures" not in store.db.work.job_health("auditor", "maya")


def test_dream_nothing_to_do_exits_0(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    run = cli_in(store.settings.data_dir, monkeypatch)

    out = run("dream", "--namespace", "maya", "--job", "retention").stdout
    assert out.splitlines()[0] == "maya retention: nothing to do"


def test_dream_prints_each_outcome_as_its_job_finishes(store: Store) -> None:
    store.add_logs(
        "maya",
        [
            {
                "session_id": "s1",
                "role": "user",
                "content": "I adopted a cat named Pepper!",
                "timestamp": utc_now().isoformat(),
            }
        ],
        now=utc_now(),
    )
    with ScriptedOpenAIServer() as server:
        server.enqueue(CHAT_COMPLETIONS, ScriptedReply(delay=30.0, body={}))
        llm = {
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
        }
        process = secretary(
            store.settings.data_dir, "dream", "--job", "retention", "--job", "extractor", **llm
        )
        assert process.stdout is not None
        first = process.stdout.readline()  # while the extractor still waits for the model
        until(lambda: server.requests_on(CHAT_COMPLETIONS), "call to the model")
        waiting = process.poll() is None
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process, WAIT * 3)

    assert first == "maya retention: nothing to do\n"
    assert waiting
    assert code == 130, err


def test_dream_a_job_the_daemon_finds_backing_off_runs_now(
    store: Store, daemon: DaemonProcess
) -> None:
    back_off(store, "auditor")

    code, out, err = finish(
        secretary(store.settings.data_dir, "dream", "--namespace", "maya", "--job", "auditor")
    )

    assert code == 0, err
    assert out.startswith("maya auditor: applied (record #"), out
    assert ": ran now, overriding the back-off after 1 failed run until " in out
    assert store.db.memories.count("maya") == 1


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        ([], 0),
        ([("applied", "1 change applied"), ("nothing", "nothing to do")], 0),
        ([("skipped", "LLM not configured"), ("refused", "over the cap; kept as plan #3")], 0),
        ([("skipped", "plan #4 awaits approval"), ("planned", "dry run")], 0),
        ([("skipped", "backing off after 2 failed runs until 2026-03-01T12:00:00+00:00")], 75),
        ([("skipped", "already running on 'maya' by h:1: this run was skipped")], 75),
        ([("skipped", "backing off after 1 failed run until ..."), ("failed", "boom")], 1),
        ([("failed", "boom; quarantined 3 items after 3 failures in a row")], 1),
    ],
)
def test_dream_exit_code_from_outcomes(outcomes: list[tuple[str, str]], code: int) -> None:
    shaped = [
        {
            "job": "auditor",
            "namespace": "maya",
            "status": status,
            "record_id": None,
            "message": text,
        }
        for status, text in outcomes
    ]
    assert dream_exit_code(shaped) == code


def _finished(url: str) -> dict[str, Any] | None:
    body: dict[str, Any] = httpx.get(url, timeout=WAIT).json()
    return body if body["status"] in ("done", "failed") else None


# -- Ctrl-C --------------------------------------------------------------------------------------


def test_dream_sigint_while_waiting_for_the_daemon_cancels_in_one_line(store: Store) -> None:
    # A daemon that holds the lease but never takes the request: the command waits.
    with Lease(store.engine, holder="elsewhere:1:daemon", ttl=timedelta(minutes=5)):
        process = secretary(store.settings.data_dir, "dream")
        until(lambda: store.db.dream_requests.get(1), "queued request")
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process, WAIT * 3)

    assert code == 130
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        "interrupted: dream request #1 cancelled before the daemon started it"
    )
    request = store.db.dream_requests.get(1)
    assert request is not None
    assert (request.status, request.error) == ("failed", "cancelled: interrupted while waiting")


def test_dream_sigint_during_an_in_process_run_ends_in_one_line(store: Store) -> None:
    store.add_logs(
        "maya",
        [
            {
                "session_id": "s1",
                "role": "user",
                "content": "I adopted a cat named Pepper!",
                "timestamp": utc_now().isoformat(),
            }
        ],
        now=utc_now(),
    )
    with ScriptedOpenAIServer() as server:
        server.enqueue(CHAT_COMPLETIONS, ScriptedReply(delay=30.0, body={}))
        llm = {
            "SECRETARY_LLM_MODEL": "openai/test-model",
            "SECRETARY_LLM_API_BASE": server.api_base,
            "SECRETARY_LLM_API_KEY": "x",
        }
        process = secretary(store.settings.data_dir, "dream", "--job", "extractor", **llm)
        until(lambda: server.requests_on(CHAT_COMPLETIONS), "call to the model")
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process, WAIT * 3)

    assert code == 130, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[-1] == (
        "interrupted: jobs that finished stay applied; the one cut short changed nothing"
    )
    assert [line for line in lines if line.startswith("interrupted")] == lines[-1:]
    assert store.db.memories.count("maya") == 2  # the two facts; nothing was extracted


def test_post_dream_to_secretary_serve_without_a_daemon_runs_there(store: Store) -> None:
    port = free_port()
    server = secretary(
        store.settings.data_dir, "serve", "--port", str(port), **FAST, SECRETARY_LOG_LEVEL="INFO"
    )
    api = f"http://127.0.0.1:{port}"
    try:
        until(lambda: _serving(f"{api}/healthz", server), "healthy server")
        accepted = httpx.post(
            f"{api}/v1/dream?namespace=maya", json={"jobs": ["auditor"]}, timeout=WAIT
        )
        assert accepted.status_code == 202
        assert accepted.json()["daemon_running"] is False
        done = until(lambda: _finished(f"{api}/v1/dream/{accepted.json()['id']}"), "request")
    finally:
        server.send_signal(signal.SIGTERM)
        _, _, err = finish(server, 60)  # uvicorn re-raises SIGTERM once it has shut down
    assert done["status"] == "done", err
    assert [(o["job"], o["status"]) for o in done["outcomes"]] == [("auditor", "applied")]
    assert current_lease(store.engine) is None  # no daemon: serve's worker ran it
    assert store.db.memories.count("maya") == 1
    assert "dream request #1 done" in err


def _serving(url: str, process: subprocess.Popen[str]) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"the server exited:\n{process.communicate()[1]}")
    try:
        return httpx.get(url, timeout=WAIT).status_code == 200
    except httpx.TransportError:
        return False
