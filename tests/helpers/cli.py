"""The CLI in-process on a store in a folder of its own, with the caller's SECRETARY_* settings
out of the way: ``run("search", "tea")`` returns click's Result, checking its exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from secretary.cli import cli

Run = Callable[..., Result]


def cli_in(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """Return ``run(*args, code=0, input=None)``: the CLI with ``--data-dir data_dir``."""
    for name in ("SECRETARY_CONFIG", "SECRETARY_DATA_DIR", "SECRETARY_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0, input: str | None = None) -> Result:
        result = runner.invoke(cli, ["--data-dir", str(data_dir), *args], input=input)
        assert result.exit_code == code, (result.output, result.stderr, result.exception)
        return result

    return invoke
