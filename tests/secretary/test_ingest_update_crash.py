"""`secretary ingest --update` SIGKILLed between two of its transactions: the ones committed
stay applied, and the command has already printed each one's record, which undo reverts; the
same ingest run again finishes the update."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import Run, cli_in

REPO = Path(__file__).resolve().parents[2]
# The command in a child that SIGKILLs itself (no cleanup at all, as the OOM killer would) when
# the writer is asked for its DIE_AT-th batch of memories: the ones before it have committed.
CHILD = """
import os, signal
from store.write.writer import Writer

add = Writer.add_memories
calls = 0

def add_or_die(self, *args, **kwargs):
    global calls
    calls += 1
    if calls == int(os.environ["DIE_AT"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return add(self, *args, **kwargs)

Writer.add_memories = add_or_die
from secretary.cli import main
main()
"""


def write(path: Path, contents: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"content": text, "external_id": f"x{n}"}) + "\n"
            for n, text in enumerate(contents)
        )
    )
    return path


def contents(run: Run) -> list[str]:
    memories = [json.loads(line) for line in run("export").stdout.splitlines()]
    return [m["content"] for m in sorted(memories, key=lambda m: m["external_id"])]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


def test_ingest_update_killed_keeps_committed_records_it_printed(run: Run, tmp_path: Path) -> None:
    old = [f"old {n}" for n in range(5)]
    new = [f"new {n}" for n in range(5)]
    config = tmp_path / "small.toml"
    config.write_text("[ingest]\ncommit_every = 2\n")
    run("init")
    run("ingest", str(write(tmp_path / "old.jsonl", old)), "--no-index")
    changed = write(tmp_path / "new.jsonl", new)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRETARY_")}

    command = ["--data-dir", str(tmp_path / "data"), "--config", str(config), "ingest"]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *command, str(changed), "--update", "--no-index"],
        cwd=REPO,
        env=env | {"DIE_AT": "2", "ANONYMIZED_TELEMETRY": "False"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.splitlines() == [
        "record #2: lines 1-2 committed (2 updated, 0 new, 0 already present); "
        "`secretary undo 2` reverts them"
    ]
    assert contents(run) == [*new[:2], *old[2:]]  # the first transaction stays applied
    run("undo", "2")
    assert contents(run) == old
    out = run("--config", str(config), "ingest", str(changed), "--update", "--no-index").stdout
    assert out.splitlines()[-1] == "5 lines: 0 new, 5 updated, 0 already present " + (
        "(memories, namespace 'default')"
    )
    assert contents(run) == new
