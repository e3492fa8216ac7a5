"""`secretary ingest`: conflicts named by line with nothing written, --update, and restores
validated line by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import Run, cli_in


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    return cli_in(tmp_path / "data", monkeypatch)


def write(path: Path, *objects: object) -> Path:
    path.write_text("".join(json.dumps(obj) + "\n" for obj in objects))
    return path


def test_ingest_same_external_id_other_content_conflict_by_line(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "likes tea", "external_id": "x1"})))
    before = run("export").output
    changed = write(
        tmp_path / "b.jsonl",
        {"content": "new one"},
        {"content": "likes coffee", "external_id": "x1"},
    )
    result = run("ingest", str(changed), code=4)
    assert result.stderr.strip() == (
        "error: conflict, nothing written: line 2: names memory 1 with different content: "
        "to change it, ask for an update (API: on_conflict=update; CLI: --update)"
    )
    assert run("export").output == before


def test_ingest_two_lines_same_external_id_other_content_refused(run: Run, tmp_path: Path) -> None:
    run("init")
    lines = [{"content": f"line {n}", "external_id": f"D1:{n}"} for n in range(1, 4)]
    lines.append({"content": "something else", "external_id": "D1:2"})
    result = run("ingest", str(write(tmp_path / "f.jsonl", *lines)), code=4)
    assert result.stderr.strip() == (
        "error: conflict, nothing written: line 4: external_id 'D1:2' is also on line 2, with "
        "different content"
    )
    assert run("export", "--all").output == ""


def test_ingest_conflict_in_a_later_batch_writes_nothing(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "old", "external_id": "late"})))
    before = run("export").output
    lines = [{"content": f"fresh {n}"} for n in range(30)]
    lines.append({"content": "new", "external_id": "late"})
    config = tmp_path / "small.toml"
    config.write_text("[ingest]\ncommit_every = 10\n")
    result = run(
        "--config", str(config), "ingest", str(write(tmp_path / "b.jsonl", *lines)), code=4
    )
    assert "line 31: names memory 1" in result.stderr
    assert run("export").output == before


def test_ingest_update_changes_the_stored_memory_and_undo_puts_it_back(
    run: Run, tmp_path: Path
) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "likes tea", "external_id": "x1"})))
    changed = write(tmp_path / "b.jsonl", {"content": "likes coffee", "external_id": "x1"})
    out = run("ingest", str(changed), "--update").output
    assert "1 line: 0 new, 1 updated, 0 already present" in out
    memory = json.loads(run("memory", "show", "1", "--json").stdout)
    assert memory["content"] == "likes coffee"
    record = json.loads(run("records", "list", "--json").stdout)[0]
    run("undo", str(record["id"]))
    assert json.loads(run("memory", "show", "1", "--json").stdout)["content"] == "likes tea"


def test_ingest_logs_same_key_other_content_conflict(run: Run, tmp_path: Path) -> None:
    run("init")
    line = {"session_id": "s", "role": "user", "timestamp": "2026-01-01T00:00:00Z"}
    run(
        "ingest",
        "--logs",
        str(write(tmp_path / "a.jsonl", {**line, "content": "hi", "idempotency_key": "k"})),
    )
    other = write(tmp_path / "b.jsonl", {**line, "content": "bye", "idempotency_key": "k"})
    result = run("ingest", "--logs", str(other), code=4)
    assert "line 1: names log line 1 with different content" in result.stderr
    assert "1 updated" in run("ingest", "--logs", str(other), "--update").output


def test_ingest_export_with_bad_lines_names_each_writes_nothing(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "a"}, {"content": "b"})))
    lines = [json.loads(line) for line in run("export").output.splitlines()]
    del lines[0]["content"]
    lines[1]["event_time"] = 12
    other = tmp_path / "other"
    run("--data-dir", str(other), "init")
    result = run(
        "--data-dir", str(other), "ingest", str(write(tmp_path / "e.jsonl", *lines)), code=3
    )
    assert result.stderr.strip() == (
        "error: rejected, nothing written: line 1: content: is required; line 2: event_time: "
        "should be a string"
    )


def test_ingest_bad_fields_said_in_plain_words_by_line(run: Run, tmp_path: Path) -> None:
    run("init")
    bad = write(
        tmp_path / "bad.jsonl",
        {"content": "x", "tags": "a"},
        {"content": "x", "timestamp": "2026"},
        {"content": "x", "timestamp": "2026-03"},
        {"content": "x", "importance": "high"},
        {"content": 5},
        {"type": "event"},
        {"content": "x", "tagz": ["a"]},
    )
    problems = run("ingest", str(bad), code=3).stderr.strip().split("; ")
    time = "should be an ISO 8601 time such as 2026-03-02T09:15:00Z"
    assert problems == [
        "error: rejected, nothing written: line 1: tags: should be a list of strings",
        f"line 2: timestamp: {time}",
        f"line 3: timestamp: {time} (input is too short)",
        "line 4: importance: should be a whole number",
        "line 5: content: should be a string",
        "line 6: content: is required",
        "line 7: tagz: is not a known field",
    ]


def test_ingest_export_with_update_refused(run: Run, tmp_path: Path) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "a"})))
    export = tmp_path / "e.jsonl"
    export.write_text(run("export").output)
    result = run("ingest", str(export), "--update", code=3)
    assert "--update: an export is restored as it was: drop --update" in result.stderr


def test_ingest_logs_two_lines_same_key_other_content_conflict(run: Run, tmp_path: Path) -> None:
    run("init")
    line = {"session_id": "s", "role": "user", "timestamp": "2026-01-01T00:00:00Z"}
    twice = write(
        tmp_path / "logs.jsonl",
        {**line, "content": "hi", "idempotency_key": "k"},
        {**line, "content": "hello", "idempotency_key": "k"},
    )
    result = run("ingest", "--logs", str(twice), "--update", code=4)
    assert "line 2: idempotency_key 'k' is also on line 1, with different content" in result.stderr
    assert run("export", "--all").output == ""


def test_ingest_export_with_a_lone_surrogate_names_the_line_and_field(
    run: Run, tmp_path: Path
) -> None:
    run("init")
    run("ingest", str(write(tmp_path / "a.jsonl", {"content": "a"}, {"content": "b"})))
    lines = [json.loads(line) for line in run("export").output.splitlines()]
    lines[1]["metadata"] = {"k": "\ud800"}  # json.dumps writes it as "\ud800"
    other = tmp_path / "other"
    run("--data-dir", str(other), "init")
    result = run(
        "--data-dir", str(other), "ingest", str(write(tmp_path / "e.jsonl", *lines)), code=3
    )
    assert result.stderr.strip() == (
        "error: rejected, nothing written: line 2: metadata: value at k holds a lone surrogate "
        "(\\ud800) at character 1: not Unicode text"
    )
    assert run("--data-dir", str(other), "export", "--all").output == ""
