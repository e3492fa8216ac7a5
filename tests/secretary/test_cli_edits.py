"""`secretary memory edit|delete` and `secretary forget`, end to end on a real store."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
        (("--pin", "--unpin"), "--pin and --unpin contradict each other"),
        (("--unpin", "--pin"), "--pin and --unpin contradict each other"),
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


def test_edit_pins_and_unpins(run: Run, stored: Path) -> None:
    run("memory", "edit", "1", "--pin")
    assert show(run, 1)["pinned"] is True
    run("memory", "edit", "1", "--unpin")
    assert show(run, 1)["pinned"] is False


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
    assert "would forget 1 memory, 0 relations, 0 log lines; nothing erased" in dry
    refused = run("forget", "2", code=1)  # no terminal to ask on, no --yes
    assert "refusing to forget without --yes" in refused.stderr
    assert show(run, 2)["content"] == SECRET

    done = run("forget", "2", "--yes").output
    assert "forgot 1 memory," in done
    record = int(done.split("erasure record #")[1].split(";")[0])
    # The records list says what the erasure erased, not only the neighbours it relinked.
    listed = run("records", "list", "--job", "forget").output
    assert f"#{record} " in listed
    assert "forget [default] applied" in listed
    assert ": erased 1 memory (#2)" in listed
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
    hinted = run("forget", "--type", "prefrence", "--yes")
    assert "note: no memory has type 'prefrence'; did you mean 'preference'?" in hinted.stderr


# -- conversation log lines -------------------------------------------------------------------

LINE = {"role": "user", "timestamp": "2026-03-01T10:00:00Z"}


def write_lines(path: Path, *lines: Mapping[str, object]) -> Path:
    path.write_text("".join(json.dumps({**LINE, **line}) + "\n" for line in lines))
    return path


def stored_lines(run: Run) -> dict[int, str]:
    """Every conversation log line of the store, id -> text (from the whole-store export)."""
    lines = [json.loads(line) for line in run("export", "--all").output.splitlines()]
    return {line["id"]: line["content"] for line in lines if line.get("kind") == "log"}


def test_forget_all_with_logs_leaves_no_line_and_the_next_dream_extracts_nothing(
    run: Run, tmp_path: Path
) -> None:
    from secretary.config import Settings
    from secretary.runner import run_job
    from store.service import Store
    from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer, chat_reply
    from tests.secretary.jobs.conftest import NOW, llm_settings

    run("init")
    chat = [
        {"session_id": "s1", "content": SECRET, "idempotency_key": "m1"},
        {"session_id": "s1", "content": "Where did I put my spare key?", "idempotency_key": "m2"},
    ]
    run("ingest", "--logs", str(write_lines(tmp_path / "a.jsonl", *chat)))
    reply = {
        "memories": [
            {
                "content": "The spare key is under the heron statue.",
                "type": "fact",
                "importance": 7,
                "tags": ["home"],
                "source_log_ids": [1],
            }
        ]
    }
    with ScriptedOpenAIServer() as server:
        settings = Settings(data_dir=tmp_path / "data", llm=llm_settings(server))

        def extract() -> tuple[str, int]:
            store = Store.open(settings)
            try:
                outcome = run_job(store, settings, "extractor", "default", now=NOW)
                return outcome.status, store.db.memories.count("default")
            finally:
                store.close()

        server.enqueue(CHAT_COMPLETIONS, chat_reply(json.dumps(reply)))
        assert extract() == ("applied", 1)
        # Lines the extractor has not reached yet, as in the report that asked for this.
        later = [
            {
                "session_id": "s2",
                "content": "Quillon also hides cash in the shed",
                "idempotency_key": "m3",
            },
            {"session_id": "s2", "content": "I am a careful person", "idempotency_key": "m4"},
        ]
        run("ingest", "--logs", str(write_lines(tmp_path / "b.jsonl", *later)))

        dry = run("forget", "--all", "--logs", "--dry-run").output
        assert "would forget 1 memory, 0 relations, 4 log lines; nothing erased" in dry
        assert "log lines #1-#4 (asked)" in dry
        assert "Quillon" not in dry
        done = run("forget", "--all", "--logs", "--yes").output
        assert "forgot 1 memory, 0 relations, 4 log lines" in done

        assert stored_lines(run) == {}
        assert extract() == ("nothing", 0)  # nothing left to read: no model call
        assert len(server.requests_on(CHAT_COMPLETIONS)) == 1
    assert "Quillon" not in run("export", "--all").output


def test_forget_log_lines_by_session_time_key_and_match(run: Run, tmp_path: Path) -> None:
    run("init")
    chat = [
        {"session_id": "s1", "content": "I moved to Porto", "idempotency_key": "a"},
        {
            "session_id": "s1",
            "content": "Call JORDAN tomorrow",
            "idempotency_key": "b",
            "timestamp": "2026-03-02T10:00:00Z",
        },
        {"session_id": "s2", "content": "jordan likes tea", "idempotency_key": "c"},
        {"session_id": "s2", "content": "The weather is fine", "idempotency_key": "d"},
    ]
    run("ingest", "--logs", str(write_lines(tmp_path / "a.jsonl", *chat)))

    by_session = run("forget", "--session", "s1", "--log-since", "2026-03-02T00:00Z", "--dry-run")
    assert "log lines #2 (asked)" in by_session.output
    assert "would forget 0 memories, 0 relations, 1 log line" in by_session.output
    by_match = json.loads(run("forget", "--match", "jordan", "--yes", "--json").stdout)
    assert (by_match["logs"], by_match["memories"]) == ([2, 3], [])
    assert by_match["record_id"] is not None
    assert "jordan" not in json.dumps(by_match).lower()
    run("forget", "--key", "d", "--yes")
    assert stored_lines(run) == {1: "I moved to Porto"}
    assert "nothing matched" in run("forget", "--session", "s9", "--yes").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--log-since", "soon"), "Invalid value for --log-since"),
        (
            ("--log-since", "2026-03-02T00:00Z", "--log-until", "2026-03-01T00:00Z"),
            "Invalid value for --log-since: is after until",
        ),
        (("--match", "   "), "Invalid value for --match: is blank"),
    ],
)
def test_forget_refuses_bad_line_options(
    run: Run, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    run("init")
    run(
        "ingest",
        "--logs",
        str(write_lines(tmp_path / "a.jsonl", {"session_id": "s", "content": "hi"})),
    )
    assert message in run("forget", *args, "--yes", code=2).stderr
    assert "idempotency key 'nope'" in run("forget", "--key", "nope", "--yes", code=1).stderr
    assert stored_lines(run) == {1: "hi"}


def test_ingest_logs_update_is_recorded_shown_by_diff_and_undone(run: Run, tmp_path: Path) -> None:
    run("init")
    line = {"session_id": "s", "idempotency_key": "k"}
    run("ingest", "--logs", str(write_lines(tmp_path / "a.jsonl", {**line, "content": "hi"})))
    changed = write_lines(tmp_path / "b.jsonl", {**line, "content": "bye", "role": "assistant"})
    run("ingest", "--logs", str(changed), "--update")
    (record,) = json.loads(run("records", "list", "--job", "ingest", "--json").stdout)

    diff = run("records", "diff", str(record["id"])).output
    assert 'log line #1 updated: "hi" -> "bye"' in diff
    assert 'role: "user" -> "assistant"' in diff
    undone = run("undo", str(record["id"])).output
    assert stored_lines(run) == {1: "hi"}
    undo_record = int(undone.split("undone by record ")[1].split(":")[0])
    run("undo", str(undo_record))
    assert stored_lines(run) == {1: "bye"}
