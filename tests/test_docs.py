"""What the README and docs/ tell a newcomer, against the repository and the commands: the
install commands, the demo's output and data, numbered steps, what retention does."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from secretary.jobs.retention import Retention

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SAMPLE = REPO / "samples" / "companion.jsonl"
# A log line as secretary.logs writes it: time, level, logger.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\S* +(TRACE|DEBUG|INFO|WARNING|ERROR)")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def test_readme_first_command_installs_the_demo_and_the_second_the_tests() -> None:
    demo, tests = shell_blocks(README.read_text())[:2]
    assert "pip install -e . " in demo
    assert "[test]" not in demo
    assert "pip install -e '.[test]'" in tests
    assert "pytest" in tests


def test_readme_demo_data_is_ignored_by_git() -> None:
    demo = shell_blocks(README.read_text())[0]
    (data_dir,) = set(re.findall(r"--data-dir (\S+)", demo))
    name = data_dir.removeprefix("./")
    patterns = [line.strip() for line in (REPO / ".gitignore").read_text().splitlines()]
    assert any(
        fnmatch.fnmatch(f"/{name}/", pattern) or fnmatch.fnmatch(name, pattern.strip("/"))
        for pattern in patterns
        if pattern and not pattern.startswith("#")
    ), data_dir


def test_readme_demo_sample_is_in_the_repository_and_said_to_be() -> None:
    demo = shell_blocks(README.read_text())[0]
    assert f"ingest {SAMPLE.relative_to(REPO)}" in demo
    assert SAMPLE.is_file()
    intro = README.read_text().split("```sh", 1)[0]
    assert "`samples/companion.jsonl`" in intro
    assert "not in the installed package" in intro


@pytest.mark.parametrize(
    "doc", [README, *sorted((REPO / "docs").glob("*.md"))], ids=lambda path: path.name
)
def test_numbered_steps_count_up_from_one(doc: Path) -> None:
    for block in re.findall(r"```\w*\n(.*?)```", doc.read_text(), re.DOTALL):
        steps = [int(n) for n in re.findall(r"^# (\d+)\. ", block, re.MULTILINE)]
        assert steps == list(range(1, len(steps) + 1)), (doc.name, steps)


def test_example_config_says_what_retention_does() -> None:
    lines = (REPO / "docs" / "secretary.example.toml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("retention = "))
    comment = lines[at - 1].lower()
    assert "purges tombstones" in comment
    assert "archive" not in comment.split("(")[0]
    assert "tombstones" in Retention.summary


def test_readme_principles_say_what_maintenance_hard_deletes() -> None:
    principles = README.read_text().split("**Principles.**", 1)[1].split("\n\n", 1)[0]
    assert "Nothing is hard-deleted" not in principles
    assert "`retention` purges" in principles
    assert "undo window (30 days)" in principles


def test_demo_prints_results_on_stdout_and_logs_on_stderr(tmp_path: Path) -> None:
    secretary = Path(sys.executable).with_name("secretary")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRETARY_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(secretary), "--data-dir", str(tmp_path / "demo-data"), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    run("init")
    ingested = run("ingest", str(SAMPLE))
    assert ingested.stdout.startswith("26 lines: 26 new")
    assert not [line for line in ingested.stdout.splitlines() if LOG_LINE.match(line)]
    assert any(LOG_LINE.match(line) for line in ingested.stderr.splitlines())


def test_the_agents_threshold_is_the_one_the_docs_and_the_cli_name() -> None:
    from store.settings import AGENT_MIN_SCORE

    said = f"{AGENT_MIN_SCORE}"
    example = (REPO / "docs" / "secretary.example.toml").read_text()
    assert f"Agents (MCP, the client's recall) ask for {said}." in example
    assert f"(`min_score` {said}, the agents' threshold)" in (REPO / "docs" / "mcp.md").read_text()
    cli = (REPO / "secretary" / "cli.py").read_text()
    assert f"agents use {said} to hear" in cli
    for client in ("sync.py", "aio.py"):
        text = (REPO / "secretary" / "client" / client).read_text()
        assert f"``AGENT_MIN_SCORE`` ({said})" in text
