"""`secretary records` and `secretary undo` end to end on the embedded default store."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from secretary.cli import cli
from secretary.cli_records import _STATUSES, records, undo
from secretary.config import Settings
from store.apply import apply_operations
from store.models import MemoryStatus, RecordStatus
from store.operations import UpdateMemory
from store.service import Store

NOW = datetime(2026, 2, 1, tzinfo=UTC)

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    for name in ("SECRETARY_CONFIG", "SECRETARY_DATA_DIR", "SECRETARY_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    # The lead registers these on the main group; until then (and without leaking) do it here.
    monkeypatch.setitem(cli.commands, "records", records)
    monkeypatch.setitem(cli.commands, "undo", undo)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> Result:
        result = runner.invoke(cli, ["--data-dir", str(tmp_path / "data"), *args])
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    return invoke


@pytest.fixture
def ingested(run: Run, tmp_path: Path) -> list[int]:
    """Two ingest records in namespace "default"; return their ids, oldest first."""
    run("init")
    for batch in (["first", "second"], ["third"]):
        path = tmp_path / f"{batch[0]}.jsonl"
        path.write_text("".join(json.dumps({"content": text}) + "\n" for text in batch))
        run("ingest", str(path))
    listed = json.loads(run("records", "list", "--json").output)
    return sorted(record["id"] for record in listed)


def test_records_list_json_has_fields_newest_first(run: Run, ingested: list[int]) -> None:
    listed = json.loads(run("records", "list", "--json").output)
    assert [r["id"] for r in listed] == sorted(ingested, reverse=True)
    wanted = {"id", "job", "namespace", "status", "started_at", "finished_at"}
    assert all(wanted <= set(r) for r in listed)
    assert {(r["job"], r["namespace"], r["status"]) for r in listed} == {
        ("ingest", "default", "applied")
    }
    assert json.loads(run("records", "list", "--json", "--job", "undo").output) == []
    assert len(json.loads(run("records", "list", "--json", "--limit", "1").output)) == 1
    assert "ingest [default] applied" in run("records", "list").output


def test_records_show_prints_operations_in_order(run: Run, ingested: list[int]) -> None:
    shown = json.loads(run("records", "show", str(ingested[0]), "--json").output)
    assert [op["op"] for op in shown["operations"]] == ["create_memory", "create_memory"]
    assert [op["seq"] for op in shown["operations"]] == [0, 1]
    assert shown["operations"][0]["after"]["content"] == "first"
    text = run("records", "show", str(ingested[1])).output
    assert "create_memory memory" in text
    assert 'content: "third"' in text
    assert "record 999 does not exist" in run("records", "show", "999", code=1).stderr


def test_undo_dry_run_prints_plan_and_writes_nothing(run: Run, ingested: list[int]) -> None:
    before = run("export").output
    out = run("undo", str(ingested[1]), "--dry-run").output
    assert "delete memory" in out
    assert "restore memory" in out
    assert "nothing written" in out
    assert run("export").output == before
    assert len(json.loads(run("records", "list", "--json").output)) == 2


def test_undo_restores_export_then_refuses_twice(
    run: Run, ingested: list[int], tmp_path: Path
) -> None:
    before = run("export").output
    later_file = tmp_path / "later.jsonl"
    later_file.write_text('{"content": "later", "timestamp": "2020-01-01T00:00:00Z"}\n')
    run("ingest", str(later_file))
    later = max(r["id"] for r in json.loads(run("records", "list", "--json").output))
    out = run("undo", str(later)).output
    assert f"record {later} undone by record" in out
    assert run("export").output == before
    assert run("index", "verify").output.startswith("default: ok")
    again = run("undo", str(later), code=1)
    assert f"record {later} was already undone" in again.stderr


def test_undo_conflict_refused_with_listing(run: Run, ingested: list[int]) -> None:
    before = run("export").output
    # The second ingest linked its memory after the first batch's last one.
    refused = run("undo", str(ingested[0]), code=1).stderr
    assert "cannot be undone, nothing written" in refused
    assert "changed since: next_id (expected None, now " in refused
    assert run("export").output == before


def test_undo_force_skips_conflicts_and_records_them(
    run: Run, ingested: list[int], tmp_path: Path
) -> None:
    store = Store.open(Settings(data_dir=tmp_path / "data"))
    try:
        ids = sorted(store.repository.index_state("default"))
        record_id = store.repository.set_status(
            "default", ids[:2], MemoryStatus.ARCHIVED, now=NOW, job="auditor"
        )
        apply_operations(
            store.repository,
            "default",
            "auditor",
            [UpdateMemory(memory_id=ids[0], changes={"content": "edited"})],
            now=NOW,
        )
    finally:
        store.close()
    dry = run("undo", str(record_id), "--dry-run").output
    assert f"memory {ids[0]}: changed since" in dry
    assert f"restore memory {ids[1]}: status, updated_at, version" in dry
    out = run("undo", str(record_id), "--force").output
    assert f"skipped memory {ids[0]}: changed since" in out
    undo_record = json.loads(run("records", "list", "--json", "--job", "undo").output)[0]
    shown = json.loads(run("records", "show", str(undo_record["id"]), "--json").output)
    assert [s["id"] for s in shown["stats"]["skipped"]] == [ids[0]]


def test_records_list_status_choices_match_record_statuses() -> None:
    assert set(_STATUSES) == {status.value for status in RecordStatus}
