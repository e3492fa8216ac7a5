"""`secretary dream` and `secretary plans`, end to end on the embedded store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from secretary.cli_common import Context, _Group
from secretary.cli_jobs import dream, plans
from secretary.config import load_settings
from store.service import Store
from tests.secretary.jobs.conftest import NOW

Run = Callable[..., Result]


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
    assert "maya auditor: nothing" in run("dream", "--job", "auditor").output


@pytest.mark.parametrize("command", [dream, plans, *plans.commands.values()])
def test_job_commands_have_help(command: click.Command) -> None:
    assert command.help


def test_dream_while_daemon_holds_lease_refused(tmp_path: Path) -> None:
    from datetime import timedelta

    from click.testing import CliRunner

    from secretary.cli import cli
    from secretary.config import load_settings
    from secretary.lease import Lease
    from store.service import Store

    runner = CliRunner()
    args = ["--data-dir", str(tmp_path / "data")]
    assert runner.invoke(cli, [*args, "init"]).exit_code == 0
    store = Store.open(load_settings(None, {}, data_dir=tmp_path / "data"))
    try:
        with Lease(store.engine, holder="host:1:abc", ttl=timedelta(minutes=5)):
            result = runner.invoke(cli, [*args, "dream"])
            assert result.exit_code == 75
            assert "daemon (host:1:abc) runs on this store" in result.stderr
            dry = runner.invoke(cli, [*args, "dream", "--dry-run"])
            assert dry.exit_code == 0, dry.output
        assert runner.invoke(cli, [*args, "dream"]).exit_code == 0
    finally:
        store.close()
