"""Failures a person can cause or meet: one or two lines naming the problem and the fix, a
non-zero exit code, and a traceback only at --log-level debug."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from secretary.cli import cli
from tests.conftest import POSTGRES_URL

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "companion.jsonl"
SECRETARY = str(Path(sys.executable).parent / "secretary")

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    for name in list(os.environ):
        if name.startswith("SECRETARY_"):
            monkeypatch.delenv(name)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
        argv = ["--log-level", "warning", "--data-dir", str(tmp_path / "data"), *args]
        result = runner.invoke(cli, argv, env=env)
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    return invoke


def one_error(result: Result) -> str:
    """Return the error message, checking it is one or two lines and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert lines, result.output
    assert lines[0].startswith("error: "), result.stderr
    assert len(lines) <= 2, result.stderr
    assert "Traceback" not in result.stderr + result.output
    return " ".join(lines)


def test_search_on_a_data_dir_without_store_names_it_and_init(run: Run, tmp_path: Path) -> None:
    message = one_error(run("search", "anything", code=1))
    assert str(tmp_path / "data") in message
    assert "secretary init" in message
    assert not (tmp_path / "data").exists()  # nothing created where nothing was


@pytest.mark.parametrize(
    "args",
    [
        ("export",),
        ("records", "list"),
        ("status",),
        ("index", "verify"),
        ("schedule", "show"),
        ("ingest", str(SAMPLE)),
        ("undo", "1"),
    ],
)
def test_commands_refuse_an_empty_data_dir_and_create_nothing(
    run: Run, tmp_path: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "data").mkdir()
    message = one_error(run(*args, code=1))
    assert "no store at" in message
    assert "secretary init" in message
    assert list((tmp_path / "data").iterdir()) == []


def test_outdated_schema_says_db_upgrade(run: Run, tmp_path: Path) -> None:
    from store.db import make_engine, upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'secretary.db'}")
    upgrade(engine, "0002")
    engine.dispose()
    message = one_error(run("export", code=1))
    assert "secretary db upgrade" in message


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://user@127.0.0.1/db", "names 'mysql', not supported"),
        ("postgres://user@127.0.0.1/db", "names 'postgres', not supported"),
        ("postgresql+asyncpg://user@127.0.0.1/db", "asks for driver 'asyncpg'"),
        ("not a url", "is not a database URL"),
    ],
)
@pytest.mark.parametrize("command", [("init",), ("config", "check")])
def test_wrong_database_url_scheme_exits_2_naming_what_works(
    run: Run, url: str, says: str, command: tuple[str, ...]
) -> None:
    message = one_error(run(*command, code=2, env={"SECRETARY_DATABASE_URL": url}))
    assert says in message
    assert "postgresql://USER" in message
    assert "sqlite:///PATH" in message


def test_unknown_log_level_is_a_usage_error_naming_the_levels(tmp_path: Path) -> None:
    argv = ["--log-level", "verbose", "--data-dir", str(tmp_path / "data"), "status"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert "'verbose' is not one of" in result.stderr
    assert "'debug'" in result.stderr
    assert "a bug" not in result.stderr


def test_unreachable_database_names_server_and_setting(run: Run) -> None:
    url = "postgresql://secretary:hunter2@127.0.0.1:1/secretary"
    message = one_error(run("search", "x", code=1, env={"SECRETARY_DATABASE_URL": url}))
    assert "cannot reach PostgreSQL at 127.0.0.1:1" in message
    assert "SECRETARY_DATABASE_URL" in message
    assert "hunter2" not in message


def test_unreachable_database_traceback_only_at_debug(tmp_path: Path) -> None:
    env = {**os.environ, "SECRETARY_DATABASE_URL": "postgresql://u@127.0.0.1:1/db"}
    base = [SECRETARY, "--data-dir", str(tmp_path)]
    quiet = subprocess.run([*base, "db", "upgrade"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 1
    assert "Traceback" not in quiet.stderr
    assert quiet.stderr.strip().splitlines()[-1].startswith("error: cannot reach PostgreSQL")
    loud = subprocess.run(
        [*base, "--log-level", "debug", "db", "upgrade"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert loud.returncode == 1
    assert "Traceback" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1].startswith("error: cannot reach PostgreSQL")


@pytest.mark.postgres
def test_fresh_postgres_missing_role_and_database_say_what_to_create(
    run: Run, postgres_engine: object
) -> None:
    from sqlalchemy import text

    from store.db import make_engine

    server = POSTGRES_URL.rsplit("/", 1)[0].split("@", 1)[1]
    role, database = "secretary_readme_role", "secretary_readme_db"
    url = f"postgresql://{role}@{server}/{database}"
    env = {"SECRETARY_DATABASE_URL": url}
    admin = make_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        message = one_error(run("init", code=1, env=env))
        assert f"has no role '{role}'" in message
        assert f"CREATE ROLE {role} LOGIN" in message
        with admin.connect() as connection:  # the README's first psql command
            connection.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'change-me'"))
        message = one_error(run("init", code=1, env=env))
        assert f"has no database '{database}'" in message
        assert f"CREATE DATABASE {database} OWNER {role}" in message
        with admin.connect() as connection:  # the README's second one
            connection.execute(text(f"CREATE DATABASE {database} OWNER {role}"))
        message = one_error(run("search", "x", code=1, env=env))
        assert "no store at" in message
        assert "secretary init" in message
        assert "ready: database" in run("init", env=env).output
        run("ingest", str(SAMPLE), "--no-index", env=env)
        assert "m020" in run("export", env=env).output
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


def test_unreachable_chroma_server_says_start_it_or_fix_url(run: Run) -> None:
    run("init")
    env = {"SECRETARY_INDEX_CHROMA_URL": "http://127.0.0.1:1"}
    message = one_error(run("index", "rebuild", code=1, env=env))
    assert "cannot reach the Chroma server at http://127.0.0.1:1" in message
    assert "SECRETARY_INDEX_CHROMA_URL" in message


def test_writes_while_the_chroma_server_is_down_say_done_and_warn_exit_0(run: Run) -> None:
    run("init")
    down = {"SECRETARY_INDEX_CHROMA_URL": "http://127.0.0.1:1"}
    steps = [
        (("ingest", str(SAMPLE)), "26 lines: 26 new"),
        (("memory", "edit", "1", "--importance", "3"), "#1 edited, now version 2"),
        (("memory", "delete", "2"), "#2 deleted"),
        (("undo", "3"), "record 3 undone by record"),
        (("forget", "4", "--yes"), "forgot 1 memory"),
    ]
    for args, says in steps:
        result = run(*args, env=down)  # exit 0: the change is stored
        assert says in result.output, (args, result.output)
        assert "warning: " in result.stderr, args
        assert "cannot reach the Chroma server at http://127.0.0.1:1" in result.stderr, args
        assert "error:" not in result.stderr, args
    assert "cannot reach" in one_error(run("index", "sync", code=1, env=down))
    run("index", "sync")  # the embedded index, reachable: it takes what waited
    assert "ok missing=0 extra=0 stale=0" in run("index", "verify").output


def test_unreachable_llm_names_the_server_and_setting(run: Run, tmp_path: Path) -> None:
    logs = tmp_path / "logs.jsonl"
    logs.write_text(
        '{"session_id": "s1", "role": "user", "content": "I adopted a cat", '
        '"timestamp": "2026-03-21T21:00:00Z"}\n'
    )
    run("init")
    run("ingest", "--logs", str(logs))
    env = {
        "SECRETARY_LLM_MODEL": "openai/gpt-4o-mini",
        "SECRETARY_LLM_API_BASE": "http://127.0.0.1:1/v1",
        "SECRETARY_LLM_API_KEY": "sk-test",
        "SECRETARY_LLM_MAX_ATTEMPTS": "1",
    }
    result = run("--log-level", "critical", "dream", "--job", "extractor", code=1, env=env)
    assert "Traceback" not in result.stderr + result.output
    assert "Cannot reach http://127.0.0.1:1/v1" in result.output
    assert "SECRETARY_LLM_API_BASE" in result.output


def test_db_upgrade_in_a_missing_directory_says_init_creates_it(tmp_path: Path) -> None:
    missing = tmp_path / "nonexist" / "x"
    result = subprocess.run(
        [SECRETARY, "--data-dir", str(missing), "db", "upgrade"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"the directory {missing} does not exist" in result.stderr
    assert "`secretary init` creates it" in result.stderr
    assert "run as the user" not in result.stderr
    assert not missing.exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's capabilities to meet permissions")
def test_permission_denied_on_the_data_dir_names_it(tmp_path: Path) -> None:
    # Root without its capabilities obeys file permissions like any user would.
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chown(locked, 65534, 65534)
    locked.chmod(0o700)
    command = [
        "setpriv",
        "--bounding-set=-all",
        "--inh-caps=-all",
        SECRETARY,
        "--data-dir",
        str(locked / "store"),
        "init",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"permission denied: {locked / 'store'}" in result.stderr
    assert "--data-dir" in result.stderr


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's capabilities to meet permissions")
def test_read_only_store_says_who_may_write(run: Run, tmp_path: Path) -> None:
    run("init")
    for path in [tmp_path / "data", *(tmp_path / "data").rglob("*")]:
        os.chown(path, 65534, 65534)
    command = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", SECRETARY]
    command += ["--data-dir", str(tmp_path / "data"), "ingest", str(SAMPLE)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "cannot write the SQLite database" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("search", "cat", "--namespace", "mya"),
        ("export", "--namespace", "mya"),
        ("records", "list", "--namespace", "mya"),
        ("index", "verify", "--namespace", "mya"),
        ("status", "--namespace", "mya"),
        ("dream", "--namespace", "mya", "--dry-run"),
    ],
)
def test_unknown_namespace_is_reported_with_the_known_ones(run: Run, args: tuple[str, ...]) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--namespace", "maya", "--no-index")
    message = one_error(run(*args, code=1))
    assert "namespace 'mya' holds nothing" in message
    assert "maya" in message


def test_known_namespace_without_matches_is_not_an_error(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    assert "no memories matched" in run("search", "zzzqqq", "--min-score", "1").output


def test_ingest_invalid_utf8_names_the_line(run: Run, tmp_path: Path) -> None:
    run("init")
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"content": "fine"}\n{"content": "caf\xe9"}\n')
    message = one_error(run("ingest", str(bad), code=3))
    assert "line 2: not valid UTF-8" in message
    assert "0xe9" in message


def test_ingest_nan_in_metadata_is_refused(run: Run, tmp_path: Path) -> None:
    run("init")
    bad = tmp_path / "nan.jsonl"
    bad.write_text('{"content": "a", "metadata": {"score": NaN}}\n')
    message = one_error(run("ingest", str(bad), code=3))
    assert "line 1" in message
    assert "finite" in message


def test_search_min_score_nan_is_a_usage_error(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    result = run("search", "cat", "--min-score", "nan", code=2)
    assert "finite" in result.stderr


def test_search_min_score_beyond_a_relevance_is_a_usage_error(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    result = run("search", "cat", "--min-score", "2", code=2)
    assert "between 0 and 1" in result.stderr


def test_ingest_lone_surrogate_names_line_and_field_writes_nothing(
    run: Run, tmp_path: Path
) -> None:
    run("init")
    bad = tmp_path / "surrogate.jsonl"
    bad.write_text(
        '{"content": "fine"}\n'
        '{"content": "a", "metadata": {"note": {"k": "\\ud800"}}}\n'
        '{"content": "b", "tags": ["ok", "\\udcff"]}\n'
    )
    message = one_error(run("ingest", str(bad), code=3))
    assert message == (
        "error: rejected, nothing written: "
        "line 2: metadata: value at note.k holds a lone surrogate (\\ud800) at character 1: "
        "not Unicode text; "
        "line 3: tags: value at 1 holds a lone surrogate (\\udcff, or the byte 0xff that is not "
        "UTF-8) at character 1: not Unicode text"
    )
    assert run("export", "--all").output == ""


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("caf\udce9",), "QUERY"),
        (("cat", "--meta", "k=\udcff"), "--meta"),
        (("cat", "--tag", "\ud800"), "--tag"),
        (("cat", "--namespace", "\udcff"), "'--namespace'"),
    ],
)
def test_search_lone_surrogate_is_a_usage_error_naming_the_option(
    run: Run, args: tuple[str, ...], option: str
) -> None:
    # A byte that is not UTF-8 on a command line reaches Python as a lone surrogate.
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    result = run("search", *args, code=2)
    assert f"Invalid value for {option}" in result.stderr
    assert "holds a lone surrogate" in result.stderr
    assert "Traceback" not in result.stderr + result.output


def test_forget_external_id_not_unicode_is_a_usage_error_erasing_nothing(run: Run) -> None:
    run("init")
    run("ingest", str(SAMPLE), "--no-index")
    result = run("forget", "--external-id", "m\udcff", "--yes", code=2)
    assert "Invalid value for --external-id" in result.stderr
    assert "(\\udcff, or the byte 0xff that is not UTF-8)" in result.stderr
    assert "Traceback" not in result.stderr + result.output
    stored = len(SAMPLE.read_text(encoding="utf-8").splitlines())
    assert f"would forget {stored} memories" in run("forget", "--all", "--dry-run").output


@pytest.mark.parametrize(
    "args",
    [("dream", "--dry-run"), ("records", "list"), ("status",), ("ingest", str(SAMPLE))],
)
def test_namespace_not_unicode_is_a_usage_error(run: Run, args: tuple[str, ...]) -> None:
    run("init")
    result = run(*args, "--namespace", "caf\udce9", code=2)
    assert "Invalid value for '--namespace'" in result.stderr
    assert "(\\udce9, or the byte 0xe9 that is not UTF-8) at character 4" in result.stderr


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--port", "70000", "70000 is not in the range 1<=x<=65535"),
        ("--port", "0", "0 is not in the range 1<=x<=65535"),
        ("--port", "-1", "-1 is not in the range 1<=x<=65535"),
        ("--host", "bad host", "'bad host' is not an IP address or a host name"),
        ("--host", "", "'' is not an IP address or a host name"),
    ],
)
def test_serve_and_run_bad_port_or_host_is_a_usage_error(
    run: Run, tmp_path: Path, command: str, option: str, value: str, why: str
) -> None:
    # No store: a command that took the value would fail later, on the missing store (exit 1).
    result = run(command, option, value, code=2)
    assert f"Invalid value for '{option}': {why}" in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", [("serve", "--port"), ("mcp", "--http")])
def test_serve_on_a_port_another_program_holds_says_so_and_exits_1(
    run: Run, command: tuple[str, str]
) -> None:
    run("init")
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        value = str(port) if command[0] == "serve" else f"127.0.0.1:{port}"
        result = run(*command, value, code=1)
    assert f"error: the API server could not start on 127.0.0.1:{port}" in result.stderr
    assert "address already in use" in result.stderr  # uvicorn's line, just before
    assert "Traceback" not in result.stderr + result.output


@pytest.mark.parametrize("args", [("config", "check"), ("serve",), ("run",), ("init",)])
def test_garbage_chroma_url_is_a_config_error_and_nothing_starts(
    run: Run, tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = {"SECRETARY_INDEX_CHROMA_URL": "chroma:8000"}
    message = one_error(run(*args, code=2, env=env))
    assert message.startswith(
        "error: config option 'index.chroma_url' (from environment variable "
        "SECRETARY_INDEX_CHROMA_URL): 'chroma:8000' is not an http:// or https:// URL"
    )
    assert not (tmp_path / "data").exists()
