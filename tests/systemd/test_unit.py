"""The systemd unit: the directives the daemon relies on, and `systemd-analyze verify`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from secretary.config import Settings, load_settings
from secretary.daemon import API_STOP_SECONDS

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "memory-secretary.service"
ENV_EXAMPLE = REPO / "systemd" / "memory-secretary.env.example"
INSTALLED = "/opt/memory-secretary/bin/secretary"
README = REPO / "README.md"
OPERATIONS = REPO / "docs" / "operations.md"


def directives(text: str) -> dict[str, list[str]]:
    """Map "Section.Key" to its values, in order (a key may repeat); comments are skipped."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


@pytest.fixture(scope="module")
def unit() -> dict[str, list[str]]:
    return directives(UNIT.read_text())


def test_unit_is_a_notify_service_with_watchdog(unit: dict[str, list[str]]) -> None:
    assert unit["Service.Type"] == ["notify"]
    assert int(unit["Service.WatchdogSec"][0]) > 0
    assert unit["Service.ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Service.ExecStart"][0].endswith(" run")


def test_unit_runs_secretary_where_the_readme_and_operations_install_it(
    unit: dict[str, list[str]],
) -> None:
    commands = unit["Service.ExecStartPre"] + unit["Service.ExecStart"]
    assert {command.split()[0] for command in commands} == {INSTALLED}
    venv = INSTALLED.removesuffix("/bin/secretary")
    for doc in (README, OPERATIONS, UNIT):
        text = doc.read_text()
        assert re.search(rf"python3 -m venv {re.escape(venv)}\s", text), doc.name
        assert f"{venv}/bin/pip install ." in text, doc.name
        # Nothing rewrites the unit's paths on the way: it is installed as it is.
        assert "sed " not in text.split("systemd/memory-secretary.service", 1)[-1][:400], doc.name


def test_unit_keeps_data_in_its_state_directory(unit: dict[str, list[str]]) -> None:
    assert unit["Service.StateDirectory"] == ["memory-secretary"]
    assert "SECRETARY_DATA_DIR=%S/memory-secretary" in unit["Service.Environment"]


def test_unit_takes_secrets_from_a_file(unit: dict[str, list[str]]) -> None:
    assert unit["Service.EnvironmentFile"] == ["-/etc/memory-secretary/env"]
    name, _, source = unit["Service.LoadCredential"][0].partition(":")
    assert source == "/etc/memory-secretary/secretary.toml"
    assert f"SECRETARY_CONFIG=%d/{name}" in unit["Service.Environment"]


def test_unit_runs_at_low_priority(unit: dict[str, list[str]]) -> None:
    assert int(unit["Service.Nice"][0]) > 0
    assert unit["Service.IOSchedulingClass"][0] in {"idle", "best-effort"}
    if unit["Service.IOSchedulingClass"][0] == "best-effort":
        assert int(unit["Service.IOSchedulingPriority"][0]) >= 4


def test_unit_stop_timeout_outlasts_the_daemon_stop_bound(unit: dict[str, list[str]]) -> None:
    bound = Settings().schedule.stop_timeout_seconds + API_STOP_SECONDS
    assert int(unit["Service.TimeoutStopSec"][0]) > bound


def test_unit_every_relaxed_hardening_directive_says_why() -> None:
    lines = UNIT.read_text().splitlines()
    hardening = lines[next(i for i, line in enumerate(lines) if "hardening" in line) :]
    for index, line in enumerate(hardening):
        if line.startswith("#") and "=" in line and not line.startswith("# "):
            comment = hardening[index - 1]
            assert comment.startswith("#"), f"{line!r} is switched off without a reason"
    assert "NoNewPrivileges=yes" in hardening
    assert "ProtectSystem=strict" in hardening


def test_env_example_names_only_real_settings(tmp_path: Path) -> None:
    values: dict[str, str] = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        line = raw.lstrip("#").strip()
        if line.startswith("SECRETARY_") and "=" in line:
            name, _, value = line.partition("=")
            values[name] = value
    assert "SECRETARY_LLM_API_KEY" in values
    values["SECRETARY_DATA_DIR"] = str(tmp_path)
    settings = load_settings(None, values)  # raises ConfigError naming any unknown option
    assert settings.schedule.consolidator == "0 4 * * *"
    assert settings.llm.api_key == "sk-change-me"


def _analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        message = "systemd-analyze is not installed"
        if os.environ.get("SECRETARY_REQUIRE_SYSTEMD_ANALYZE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = _analyze()
    # verify checks that the commands exist: point them at a real executable.
    secretary = shutil.which("secretary", path=str(Path(sys.executable).parent)) or sys.executable
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(INSTALLED, secretary))
    result = subprocess.run(
        [str(analyze), "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Unknown keys and bad values are only warnings (exit code 0): fail on any line about us.
    ours = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if UNIT.name in line or str(tmp_path) in line
    ]
    assert result.returncode == 0, result.stderr
    assert ours == []


def test_systemd_analyze_verify_rejects_a_broken_copy(tmp_path: Path) -> None:
    analyze = _analyze()
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(INSTALLED, sys.executable).replace("Nice=", "Nicee="))
    result = subprocess.run(
        [str(analyze), "verify", str(copy)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Nicee" in result.stderr  # so the check above would notice a typo
