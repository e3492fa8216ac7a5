"""The floor plan holds: no import circle, small modules, light settings.

The layer and no-SQL rules are import-linter contracts in pyproject.toml (`lint-imports`, run by
CI); these tests add what import-linter does not check the same way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "secretary", "prompts")
MAX_LINES = 500


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Return the strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_import_graph_has_no_circle_even_counting_type_checking_and_local_imports() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)

    assert _cycles(graph) == []


def test_cycle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")

    assert _cycles(graph) == [["a", "b"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_package_modules_are_at_most_500_lines(package: str) -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in (REPO / package).rglob("*.py")
        if "migrations" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }

    assert long == {}


def test_loading_settings_imports_neither_the_scheduler_nor_the_store() -> None:
    code = (
        "import sys, secretary.config; "
        "loaded = [m for m in ('secretary.scheduler', 'apscheduler.schedulers', 'sqlalchemy',"
        " 'chromadb', 'litellm') if m in sys.modules]; "
        "print(loaded); sys.exit(bool(loaded))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )

    assert result.returncode == 0, result.stdout + result.stderr
