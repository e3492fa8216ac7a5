"""`secretary records` and `secretary undo` end to end on the embedded default store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from secretary.cli_records import _STATUSES
from secretary.config import Settings
from store.kinds import MemoryStatus, Outcome, RecordStatus
from store.operations import SetStatus, UpdateMemory
from store.service import Store
from store.write.record_info import RecordInfo
from tests.helpers.cli import Run, cli_in

NOW = datetime(2026, 2, 1, tzinfo=UTC)


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


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
    assert "more:" not in run("records", "list").output
    newest = run("records", "list", "--limit", "1").output.splitlines()
    assert newest[1:] == [f"more: older records than #{max(ingested)}; --limit 2 shows more"]
    mistyped = run("records", "list", "--job", "extracter")
    assert mistyped.exit_code == 0
    assert mistyped.output == "no records of job 'extracter'; the jobs with records: ingest\n"
    assert run("records", "list", "--job", "ingest", "--status", "failed").output == "no records\n"


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
    assert "restore memory" not in out  # its timeline neighbour's relink is recomputed
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


def test_undo_refused_names_the_later_record_and_cascade_takes_both_back(
    run: Run, ingested: list[int]
) -> None:
    before = run("export").output
    # The second ingest placed its memory after the first batch's last one: no dependency.
    first = json.loads(run("memory", "list", "--json").output)["memories"][0]["id"]
    edited = run("memory", "edit", str(first), "--content", "first, reworded").output
    edit_record = int(edited.split("record #")[1].split(")")[0].split(";")[0])
    after_edit = run("export").output

    refused = run("undo", str(ingested[0]), code=1).stderr
    assert "cannot be undone, nothing written" in refused
    assert f"#{edit_record} edit" in refused
    assert "changed content of memory" in refused
    assert f"First undo #{edit_record}, or undo this record with --cascade" in refused
    assert "--cascade" in refused
    assert "next_id" not in refused  # a timeline relink is no conflict
    assert run("export").output == after_edit

    dry = run("undo", str(ingested[0]), "--dry-run", code=1).output  # it would be refused
    assert f"#{edit_record} edit" in dry
    assert f"--cascade undoes #{edit_record} with it" in dry
    assert dry.endswith("dry run: nothing written; this undo would be refused\n")
    forced = run("undo", str(ingested[0]), "--dry-run", "--force").output  # the rest applies
    assert forced.endswith("dry run: nothing written\n")
    planned = run("undo", str(ingested[0]), "--cascade", "--dry-run").output
    assert f"undoes #{edit_record}, #{ingested[0]}" in planned
    assert "nothing written" in planned
    assert run("export").output == after_edit

    done = run("undo", str(ingested[0]), "--cascade").output
    assert f"record {ingested[0]} with #{edit_record} (--cascade) undone by record" in done
    exported = [json.loads(line) for line in run("export").output.splitlines()]
    assert [m["content"] for m in exported if m["status"] == "active"] == ["third"]
    assert before != after_edit


def test_undo_force_skips_conflicts_and_records_them(
    run: Run, ingested: list[int], tmp_path: Path
) -> None:
    store = Store.open(Settings(data_dir=tmp_path / "data"))
    try:
        ids = sorted(store.db.memories.index_state("default"))
        # Content changes leave the timeline alone: the two parts of the record are independent.
        reworded = [UpdateMemory(memory_id=i, changes={"content": f"#{i}"}) for i in ids[:2]]
        record_id = store.db.writer.apply("default", "auditor", reworded, now=NOW).record_id
        assert record_id is not None
        store.db.writer.apply(
            "default",
            "auditor",
            [UpdateMemory(memory_id=ids[0], changes={"content": "edited"})],
            now=NOW,
        )
    finally:
        store.close()
    dry = run("undo", str(record_id), "--dry-run", code=1).output  # refused without --force
    assert f"memory {ids[0]}: changed since" in dry
    assert f"restore memory {ids[1]}: content\n" in dry  # derived fields are recomputed
    out = run("undo", str(record_id), "--force").output
    assert f"skipped memory {ids[0]}: changed since" in out
    undo_record = json.loads(run("records", "list", "--json", "--job", "undo").output)[0]
    shown = json.loads(run("records", "show", str(undo_record["id"]), "--json").output)
    assert [s["id"] for s in shown["stats"]["skipped"]] == [ids[0]]


def test_records_list_status_choices_match_record_statuses() -> None:
    assert set(_STATUSES) == {status.value for status in RecordStatus}


# -- what happened, at a glance ----------------------------------------------------------------


@pytest.fixture
def audited(run: Run, ingested: list[int], tmp_path: Path) -> dict[str, int]:
    """Besides the ingests: an auditor run that merged one memory into another (2.5 s, tokens,
    dropped items, a quarantined id) and a failed extractor run."""
    store = Store.open(Settings(data_dir=tmp_path / "data"))
    try:
        ids = sorted(store.db.memories.index_state("default"))
        stats = {
            "dropped": [{"item": "verdict 7", "reason": "superseded_by must be null"}],
            "dropped_ids": [404],
            "quarantined": [ids[2]],
            "stopped": "budget exhausted",
        }
        merged = store.db.writer.apply(
            "default",
            "auditor",
            [SetStatus(memory_id=ids[1], status=MemoryStatus.MERGED, replaced_by=ids[0])],
            now=NOW,
            info=RecordInfo(
                model="m",
                tokens_in=1200,
                tokens_out=34,
                cost=0.0123,
                stats=stats,
                finished_at=NOW + timedelta(seconds=2.5),
            ),
        ).record_id
        failed = store.db.writer.apply(
            "default",
            "extractor",
            (),
            now=NOW,
            info=RecordInfo(outcome=Outcome.FAILED, error="ValueError: bad reply"),
        ).record_id
    finally:
        store.close()
    assert merged is not None
    assert failed is not None
    return {"merged": merged, "failed": failed, "keeper": ids[0], "merged_away": ids[1]}


def test_records_list_shows_duration_changes_tokens_error_and_reason(
    run: Run, audited: dict[str, int]
) -> None:
    lines = run("records", "list").output.splitlines()
    merged = next(line for line in lines if line.startswith(f"#{audited['merged']} "))
    assert "auditor [default] applied 2.5s: 1 merged" in merged
    assert merged.endswith("; 1,200 + 34 tokens (cost 0.0123); stopped early: budget exhausted")
    failed = next(line for line in lines if line.startswith(f"#{audited['failed']} "))
    assert failed.endswith(
        "extractor [default] failed 0.0s: no changes; error: ValueError: bad reply"
    )
    ingest = next(line for line in lines if " ingest " in line and ": 1 created" in line)
    assert ingest.endswith("applied 0.0s: 1 created, 1 relinked")
    listed = {r["id"]: r for r in json.loads(run("records", "list", "--json").output)}
    shown = listed[audited["merged"]]
    assert shown["changes_by_kind"]["merged"] == 1
    assert shown["duration_seconds"] == 2.5
    assert (shown["tokens_in"], shown["tokens_out"], shown["cost"]) == (1200, 34, 0.0123)
    assert shown["reason"] == "stopped early: budget exhausted"
    assert listed[audited["failed"]]["error"] == "ValueError: bad reply"


def test_records_show_lists_dropped_and_quarantined(run: Run, audited: dict[str, int]) -> None:
    text = run("records", "show", str(audited["merged"])).output
    assert "dropped (2):\n  verdict 7: superseded_by must be null\n" in text
    assert "  #404: named by the reply but not sent to it\n" in text
    assert "quarantined (1): #" in text
    assert "reason: stopped early: budget exhausted" in text
    shown = json.loads(run("records", "show", str(audited["merged"]), "--json").output)
    assert shown["dropped"][0] == {"item": "verdict 7", "reason": "superseded_by must be null"}
    assert len(shown["quarantined"]) == 1
    assert shown["changes_by_kind"]["merged"] == 1


def test_records_diff_tells_merge_and_undo(run: Run, audited: dict[str, int]) -> None:
    keeper, gone = audited["keeper"], audited["merged_away"]
    text = run("records", "diff", str(audited["merged"])).output.splitlines()
    assert text[0].startswith(f"record #{audited['merged']}: auditor on 'default', applied, ")
    assert text[1] == f'  #{gone} -> #{keeper}: "first"'
    assert text[2] == f'      was #{gone} "second"'
    shown = json.loads(run("records", "diff", str(audited["merged"]), "--json").output)
    assert shown["changes_by_kind"]["merged"] == 1
    assert shown["entries"][0]["into"] == {"id": keeper, "text": "first"}
    run("undo", str(audited["merged"]), "--no-index")
    undo_id = json.loads(run("records", "list", "--json", "--job", "undo").output)[0]["id"]
    undone = run("records", "diff", str(undo_id)).output
    assert f"undoes record #{audited['merged']}: puts back what it changed" in undone
    assert f'  #{gone} restored to active (was merged): "second"' in undone
    failed = run("records", "diff", str(audited["failed"])).output
    assert "error: ValueError: bad reply\n  no changes" in failed
    assert "record 999 does not exist" in run("records", "diff", "999", code=1).stderr


def test_undo_of_a_record_that_changed_nothing_says_so_and_exits_0(
    run: Run, audited: dict[str, int]
) -> None:
    before = run("records", "list", "--json").output

    result = run("undo", str(audited["failed"]))  # a failed run: it changed nothing

    assert result.output.startswith("nothing to undo: record")
    assert "changed nothing that undo could restore" in result.output
    assert run("records", "list", "--json").output == before  # no undo record written


def test_records_list_run_that_dropped_all_it_got_says_applied_nothing(
    run: Run, ingested: list[int], tmp_path: Path
) -> None:
    store = Store.open(Settings(data_dir=tmp_path / "data"))
    try:
        dropped = [{"item": f"memory {n}", "reason": "cites no log line"} for n in range(10)]
        record = store.db.writer.apply(
            "default",
            "extractor",
            (),
            now=NOW,
            info=RecordInfo(
                outcome=Outcome.NOTHING, tokens_in=800, tokens_out=27, stats={"dropped": dropped}
            ),
        ).record_id
    finally:
        store.close()

    line = next(
        x for x in run("records", "list").output.splitlines() if x.startswith(f"#{record} ")
    )
    listed = json.loads(run("records", "list", "--json").output)

    assert line.endswith(
        "extractor [default] applied 0.0s: applied nothing; dropped 10 items; 800 + 27 tokens"
    )
    shown = next(r for r in listed if r["id"] == record)
    assert (shown["summary"], shown["dropped_count"]) == ("applied nothing", 10)


def test_undo_dry_run_past_an_erasure_offers_no_cascade(run: Run, ingested: list[int]) -> None:
    first = json.loads(run("memory", "list", "--json").output)["memories"][0]["id"]
    run("memory", "edit", str(first), "--content", "first, reworded")
    edit_record = max(r["id"] for r in json.loads(run("records", "list", "--json").output))
    run("forget", str(first), "--yes")
    dry = run("undo", str(edit_record), "--dry-run", code=1).output
    assert "forget" in dry
    assert "an erasure cannot be undone, so --cascade cannot take it back" in dry
    assert "--cascade undoes" not in dry
    refused = run("undo", str(edit_record), code=1).stderr
    assert refused.startswith(f"error: record {edit_record} cannot be undone, nothing written;")
    assert "\nlater records depend on it, newest first:\n" in refused
