"""`secretary memory edit|delete` and `secretary forget`, end to end on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import Run, cli_in

SECRET = "Quillon keeps the spare key under the blue heron statue"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


@pytest.fixture
def stored(run: Run, tmp_path: Path) -> Path:
    run("init")
    lines = [
        {"content": "likes green tea", "external_id": "tea", "tags": ["drinks"]},
        {"content": SECRET, "external_id": "key", "tags": ["home"]},
        {"content": "walked the dog by the river", "external_id": "dog"},
    ]
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run("ingest", str(path))
    return tmp_path / "data"


def show(run: Run, memory_id: int) -> dict[str, object]:
    return dict(json.loads(run("memory", "show", str(memory_id), "--json").stdout))


def test_edit_then_undo(run: Run, stored: Path) -> None:
    out = run("memory", "edit", "1", "--content", "likes black tea", "--importance", "8").output
    assert "#1 edited, now version 2" in out
    record = int(out.split("record #")[1].split(";")[0])
    memory = show(run, 1)
    assert (memory["content"], memory["importance"], memory["tags"]) == (
        "likes black tea",
        8,
        ["drinks"],
    )
    assert "edit" in run("records", "list").output
    run("undo", str(record))
    assert show(run, 1)["content"] == "likes green tea"


def test_edit_with_a_stale_version_changes_nothing(run: Run, stored: Path) -> None:
    run("memory", "edit", "1", "--tag", "tea", "--version", "1")
    stale = run("memory", "edit", "1", "--content", "likes coffee", "--version", "1", code=4)
    assert stale.stderr.strip() == (
        "error: memory 1 is at version 2, not 1: it changed since you read it; "
        "read it again and retry"
    )
    assert show(run, 1)["content"] == "likes green tea"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name something to change"),
        (("--tag", "x", "--no-tags"), "contradict"),
        (("--metadata", "[1]"), "Invalid value for --metadata: must be a JSON object"),
        (("--event-time", "soon"), "Invalid value for --event-time"),
        (("--content", "   "), "Invalid value for --content"),
    ],
)
def test_edit_refuses_bad_options(
    run: Run, stored: Path, args: tuple[str, ...], message: str
) -> None:
    refused = run("memory", "edit", "1", *args, code=2)
    assert message in refused.stderr
    assert show(run, 1)["version"] == 1


def test_edit_of_a_missing_or_other_namespaces_memory(run: Run, stored: Path) -> None:
    missing = run("memory", "edit", "99", "--content", "x", code=1)
    assert "memory 99" in missing.stderr
    other = run("memory", "edit", "1", "--content", "x", "-n", "elsewhere", code=1)
    assert "elsewhere" in other.stderr


def test_delete_then_undo(run: Run, stored: Path) -> None:
    out = run("memory", "delete", "3").output
    assert "#3 deleted" in out
    assert show(run, 3)["status"] == "deleted"
    again = run("memory", "delete", "3", code=4)
    assert "memory 3 is deleted: only active memories change" in again.stderr
    record = int(out.split("record #")[1].split(";")[0])
    run("undo", str(record))
    assert show(run, 3)["status"] == "active"


def test_forget_asks_first_and_a_dry_run_lists(run: Run, stored: Path) -> None:
    dry = run("forget", "--external-id", "key", "--dry-run").output
    assert "#2 (asked)" in dry
    assert "would forget 1 memories, 0 relations, 0 log lines; nothing erased" in dry
    refused = run("forget", "2", code=1)  # no terminal to ask on, no --yes
    assert "refusing to forget without --yes" in refused.stderr
    assert show(run, 2)["content"] == SECRET

    done = run("forget", "2", "--yes").output
    assert "forgot 1 memories" in done
    record = int(done.split("erasure record #")[1].split(";")[0])
    missing = run("memory", "show", "2", code=1)
    assert "memory" in missing.stderr
    assert "Quillon" not in run("export", "--all").output
    refused_undo = run("undo", str(record), code=1)
    assert "is a forget" in refused_undo.stderr
    found = run("search", "spare key heron statue", "--json").output
    assert "Quillon" not in found


def test_forget_by_filter_and_all(run: Run, stored: Path) -> None:
    by_tag = json.loads(run("forget", "--tag", "drinks", "--yes", "--json").stdout)
    assert [m["id"] for m in by_tag["memories"]] == [1]
    assert by_tag["record_id"] is not None
    run("forget", "--all", "--yes")
    listed = json.loads(run("memory", "list", "--status", "active", "--json").stdout)
    assert listed["memories"] == []


def test_forget_needs_a_selection_and_good_filters(run: Run, stored: Path) -> None:
    assert "name what to forget" in run("forget", "--yes", code=2).stderr
    assert "Invalid value for --since" in run("forget", "--since", "soon", code=2).stderr
    assert "nothing matched" in run("forget", "--tag", "nope", "--yes").output
