"""`secretary memory list|show`, `namespaces`, `export --all` and `import`, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import Run, cli_in
from tests.secretary.test_cli import SAMPLE


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


def test_memory_list_pages_with_cursor(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    first = run("memory", "list", "--limit", "10").output.splitlines()
    assert len(first) == 11
    assert first[0].startswith("#1 ")
    assert first[-1].startswith("more: --cursor ")
    cursor = first[-1].split()[-1]
    rest = json.loads(run("memory", "list", "--cursor", cursor, "--limit", "100", "--json").stdout)
    assert [m["id"] for m in rest["memories"]] == list(range(11, 27))
    assert rest["next_cursor"] is None


def test_memory_list_filters_and_bad_option(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    listed = json.loads(run("memory", "list", "--tag", "pets", "--json").stdout)["memories"]
    assert listed
    assert all("pets" in m["tags"] for m in listed)
    bad = run("memory", "list", "--cursor", "nope", code=2)
    assert "Invalid value for --cursor: not a cursor this API gave out" in bad.stderr


def test_memory_list_hints_a_misspelt_type(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    hinted = run("memory", "list", "--type", "fcat", "--type", "event")
    assert "note: no memory has type 'fcat'; did you mean 'fact'?" in hinted.stderr
    assert "[event]" in hinted.stdout


def test_memory_show_with_relations_and_missing_id(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    shown = run("memory", "show", "3").output.splitlines()
    assert shown[0].startswith("#3 ")
    assert "version 1" in shown[0]
    as_json = json.loads(run("memory", "show", "3", "--json").stdout)
    assert (as_json["id"], as_json["relations"], as_json["replaced_by"]) == (3, [], None)
    missing = run("memory", "show", "999", code=1)
    assert missing.stderr.strip() == "error: memory 999 in namespace 'default' does not exist"


def test_namespaces_lists_counts(run: Run, tmp_path: Path) -> None:
    run("init")
    assert "no namespaces" in run("namespaces").output
    run("ingest", str(SAMPLE), "--no-index")
    log = tmp_path / "log.jsonl"
    log.write_text(
        json.dumps(
            {
                "session_id": "s",
                "role": "user",
                "content": "hi",
                "timestamp": "2026-01-01T00:00:00Z",
            }
        )
        + "\n"
    )
    run("ingest", "--logs", str(log), "--namespace", "chat")
    assert run("namespaces").output.splitlines() == [
        "chat: 0 memories, 0 retired, 1 log line",
        "default: 26 memories, 0 retired, 0 log lines",
    ]
    data = json.loads(run("namespaces", "--json").stdout)
    assert data["namespaces"][1] == {
        "namespace": "default",
        "memories": 26,
        "retired": 0,
        "logs": 0,
    }


def test_export_all_import_round_trip(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    run("ingest", str(SAMPLE), "--no-index", "--namespace", "twin")
    dump = tmp_path / "all.jsonl"
    dump.write_text(run("export", "--all").output)
    other = str(tmp_path / "other")
    run("--data-dir", other, "init")
    out = run("--data-dir", other, "import", str(dump), "--no-index").output
    assert out.splitlines()[0] == (
        "imported: 52 memories, 0 relations, 0 log lines, 2 records, 0 job states, 0 schedules; "
        "0 already present"
    )
    assert run("--data-dir", other, "export", "--all").output == dump.read_text()
    again = run("--data-dir", other, "import", str(dump), "--no-index").output
    assert "; 54 already present" in again
    # The namespace's own export still restores with ingest.
    assert (
        run("--data-dir", other, "export", "--namespace", "twin").output
        == run("export", "--namespace", "twin").output
    )


def test_import_into_another_namespace(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    dump = tmp_path / "default.jsonl"
    dump.write_text(run("export").output)
    out = run("import", str(dump), "--namespace", "copy", "--no-index").output
    assert out.startswith("imported into namespace 'copy': 26 memories")
    listed = json.loads(run("memory", "list", "--namespace", "copy", "--json").stdout)
    assert [m["external_id"] for m in listed["memories"][:2]] == ["m001", "m002"]
    assert listed["memories"][0]["id"] > 26
    refused = run("import", str(dump), "--namespace", "copy", code=3)
    assert "already holds memories" in refused.stderr


def test_import_bad_line_named_nothing_written(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    lines = run("export", "--all").output.splitlines()
    broken = json.loads(lines[4])
    broken["importance"] = 11
    lines[4] = json.dumps(broken)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    other = str(tmp_path / "other")
    run("--data-dir", other, "init")
    result = run("--data-dir", other, "import", str(bad), code=3)
    assert result.stderr.strip() == (
        "error: rejected, nothing written: line 5: importance: Input should be less than or "
        "equal to 10"
    )
    assert run("--data-dir", other, "export", "--all").output == ""


def test_export_all_with_namespace_is_a_usage_error(run: Run) -> None:
    run("init")
    result = run("export", "--all", "--namespace", "x", code=2)
    assert "--all exports every namespace: drop --namespace" in result.stderr
