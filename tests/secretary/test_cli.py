"""The CLI end to end on the embedded default (SQLite + embedded Chroma + offline embedder)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from secretary.cli import cli
from tests.helpers.cli import Run, cli_in

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "companion.jsonl"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


def all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        found.append((path, command))
        if isinstance(command, click.Group):
            found.extend(all_commands(command, path + " "))
    return found


@pytest.mark.parametrize(("path", "command"), all_commands(cli), ids=lambda v: str(v))
def test_command_has_help_and_is_in_readme(path: str, command: click.Command) -> None:
    assert command.help, f"`secretary {path}` has no help text"
    result = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0
    readme = (REPO / "README.md").read_text()
    assert f"secretary {path}" in readme, f"`secretary {path}` is not in the README"


def test_ingest_then_search_json_finds_sample(run: Run) -> None:
    run("init")
    out = run("ingest", str(SAMPLE)).output
    assert "26 lines: 26 new" in out
    hits = json.loads(run("search", "half marathon finish time", "--json", "--k", "3").stdout)
    assert hits["hits"][0]["external_id"] == "m020"
    first = hits["hits"][0]
    assert {"id", "external_id", "content", "score", "breakdown"} <= set(first)
    assert run("index", "verify").output.startswith("default: ok")


def test_ingest_same_file_twice_changes_nothing(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE))
    before = run("export").output
    assert "0 new, 26 already present" in run("ingest", str(SAMPLE)).output
    assert run("export").output == before


def test_ingest_bad_lines_reported_by_number_nothing_written(run: Run, tmp_path: Path) -> None:
    run("init")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"content": "fine"}\n{"content": ""}\nnot json\n\n{"content": "x", "importance": 99}\n'
    )
    result = run("ingest", str(bad), code=3)
    assert re.search(r"line 2: content", result.stderr)
    assert "line 3: not valid JSON" in result.stderr
    assert "line 5: importance" in result.stderr
    assert "namespace 'default' holds nothing" in run("export", code=1).stderr


def test_ingest_bad_json_names_line_and_column(run: Run, tmp_path: Path) -> None:
    run("init")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"content": "x", "type": "e"\n'  # no closing brace
        '{"content": "x",}\n'
        "hello\n"
        '{"content": "x"} extra\r\n'
        '{"content": "x",\n'
    )
    errors = run("ingest", str(bad), code=3).stderr
    for says in [
        "line 1: not valid JSON: Expecting ',' delimiter at column 29 (the end of the line)",
        "line 2: not valid JSON: Expecting property name enclosed in double quotes at column 17",
        "line 3: not valid JSON: Expecting value at column 1",
        "line 4: not valid JSON: Extra data at column 18",
        "line 5: not valid JSON: Expecting property name enclosed in double quotes at column 17"
        " (the end of the line)",
    ]:
        assert says in errors, errors


def test_export_then_ingest_restores_into_new_store(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--namespace", "maya")
    run("dream", "--job", "linker", "--namespace", "maya")  # associative edges, no model
    dump = tmp_path / "dump.jsonl"
    dump.write_text(run("export", "--namespace", "maya").output)
    relations = dump.read_text().count('"kind":"relation"')
    assert relations > 0
    other = CliRunner()
    args = ["--data-dir", str(tmp_path / "other")]
    assert other.invoke(cli, [*args, "init"]).exit_code == 0
    restored = other.invoke(cli, [*args, "ingest", str(dump), "--namespace", "maya"])
    assert restored.exit_code == 0, restored.output
    lines = 26 + relations  # each line counted, the relations' too
    assert restored.stdout.startswith(
        f"{lines} lines: {lines} new (26 memories, {relations} relations), 0 already present"
    )
    again = other.invoke(cli, [*args, "export", "--namespace", "maya"])
    assert again.output == dump.read_text()
    verify = other.invoke(cli, [*args, "index", "verify"])
    assert verify.exit_code == 0, verify.output


def test_search_hints_a_misspelt_type(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    hinted = run("search", "running", "--type", "evnet")
    assert "note: no memory has type 'evnet'; did you mean 'event'?" in hinted.stderr
    assert "note:" not in run("search", "running", "--type", "event").stderr
    assert "note:" not in run("search", "running", "--type", "recipe_card").stderr  # open set


def test_search_no_reinforce_changes_nothing(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE))
    before = run("export").output
    run("search", "cat", "--no-reinforce")
    assert run("export").output == before
    run("search", "cat")
    assert run("export").output != before


def test_index_verify_detects_and_rebuild_repairs_drift(run: Run, tmp_path: Path) -> None:
    from secretary.config import load_settings
    from store.service import Store

    run("init")
    run("ingest", str(SAMPLE))
    store = Store.open(load_settings(None, {}, data_dir=tmp_path / "data"))
    try:
        store.index.delete("default", [1, 2])
    finally:
        store.close()
    result = run("index", "verify", code=1)
    assert "missing=2" in result.output
    run("index", "rebuild")
    assert "default: ok" in run("index", "verify").output


def test_index_sync_completes_a_rebuild_cut_short(run: Run, tmp_path: Path) -> None:
    from secretary.config import load_settings
    from store.service import Store

    run("init")
    run("ingest", str(SAMPLE))
    store = Store.open(load_settings(None, {}, data_dir=tmp_path / "data"))
    try:
        store.indexer.request_rebuild(["default"])
        store.indexer.sync(limit=10)  # then the process died
    finally:
        store.close()

    result = run("index", "verify", code=1)
    assert "default: REBUILDING missing=0 extra=0 stale=0" in result.output
    assert "10 of 26 memories copied" in result.output
    synced = run("index", "sync").output
    assert "default: indexed 16 memories (resumed after 10)" in synced
    assert "the vector index is up to date: nothing waits in the outbox" in synced
    assert "default: ok" in run("index", "verify").output


def test_commands_before_init_explain_what_to_do(run: Run) -> None:
    result = run("search", "anything", code=1)
    assert "secretary init" in result.stderr


def test_config_check_prints_effective_settings(run: Run) -> None:
    settings = json.loads(run("config", "check").stdout)
    assert settings["api"]["host"] == "127.0.0.1"


def test_config_invalid_file_clean_error(run: Run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[api]\nport = 'x'\n")
    result = run("--config", str(bad), "config", "check", code=2)
    assert "config option 'api.port'" in result.stderr
    assert "Traceback" not in result.stderr + result.output
