"""Each import-linter contract catches the violation it names.

For every contract in pyproject.toml, the packages are copied to a temporary directory, one import
that breaks the contract is planted in one module of the copy, and `lint-imports` is run on the
copy for that contract alone: it must report it broken. The untouched copy keeps every contract,
and a contract added without a planted violation here fails the test that lists them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("secretary", "store", "prompts")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: contract id -> (module file of the copy, the line planted at its end, what it shows)
VIOLATIONS: dict[str, tuple[str, str]] = {
    # store imports the secretary
    "packages": ("store/kinds.py", "import secretary.config"),
    # a value module imports a use case
    "store-floors": ("store/views.py", "import store.service"),
    # the lexical index reaches for the vector index's embedder
    "indexes-apart": ("store/lexical/cache.py", "import store.vector.embedder"),
    # indirectly: the vector index (which search reads) now imports the database and its writer
    "search-reads": ("store/vector/index.py", "import store.database"),
    # a route opens a unit of work itself
    "api-use-cases": ("store/api/routes_search.py", "import store.write.unit"),
    # a console page reaches for the tables
    "console-no-writes": ("store/api/console/pages_memories.py", "import store.models"),
    # pure scoring imports SQLAlchemy
    "pure-values": ("store/search/scoring.py", "import sqlalchemy"),
    # the configuration imports the runner above it
    "secretary-floors": ("secretary/config.py", "import secretary.runner"),
    # a command imports SQLAlchemy
    "secretary-no-sql": ("secretary/cli_status.py", "import sqlalchemy"),
    # indirectly: a job's pure helper imports the database, which imports SQLAlchemy
    "jobs-no-sql": ("secretary/jobs/clustering.py", "import store.database"),
    # the jobs' settings import the registry above them
    "jobs-floors": ("secretary/jobs/settings.py", "import secretary.jobs.registry"),
    # the HTTP client imports store code
    "client-http-only": ("secretary/client/errors.py", "import store.errors"),
    # the client's values import the calls above them
    "client-floors": ("secretary/client/models.py", "import secretary.client.calls"),
    # an MCP tool imports the store
    "mcp-tools-are-client-calls": ("secretary/mcp_server/tools.py", "import store.kinds"),
    # the tools import the app that serves them
    "mcp-floors": ("secretary/mcp_server/tools.py", "import secretary.mcp_server.app"),
    # the console's pure rendering imports its web layer
    "console-floors": ("store/api/console/render.py", "import store.api.console.web"),
    # a circle between two modules of the lexical index
    "no-circles": ("store/lexical/columns.py", "import store.lexical.cache"),
}


def _contracts() -> dict[str, str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packages and pyproject.toml, without caches or data files."""
    root = tmp_path_factory.mktemp("pristine")
    for package in PACKAGES:
        shutil.copytree(
            REPO / package,
            root / package,
            ignore=lambda _dir, names: [
                n for n in names if n == "__pycache__" or (Path(n).suffix not in ("", ".py"))
            ],
        )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(LINT_IMPORTS), str(root / "pyproject.toml"), "--no-cache"]
    if contract is not None:
        command += ["--contract", contract]
    # The copy comes first on the path: the editable install's finder is only consulted after it.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)


def test_every_contract_has_a_planted_violation() -> None:
    assert sorted(_contracts()) == sorted(VIOLATIONS)


def test_the_copy_keeps_every_contract(pristine: Path) -> None:
    result = _lint(pristine)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(VIOLATIONS)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize("contract", sorted(VIOLATIONS))
def test_contract_is_broken_by_its_violation(contract: str, pristine: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    module, line = VIOLATIONS[contract]
    target = root / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # planted\n")

    result = _lint(root, contract)

    report = " ".join(result.stdout.split())  # the report wraps long names
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 1 broken." in report, result.stdout
    assert f"Broken contracts ---------------- {_contracts()[contract]}" in report, result.stdout
    # and it names the planted import: the module imported (whole, or relative to a package)
    assert line.split()[-1].rsplit(".", 1)[-1] in report, result.stdout
