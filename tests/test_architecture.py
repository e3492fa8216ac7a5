"""The floor plan holds: no import circle, small modules, light settings.

The layer and no-SQL rules are import-linter contracts in pyproject.toml (`lint-imports`, run by
CI); these tests add what import-linter does not check the same way.
"""

from __future__ import annotations

import ast
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


KERNEL = ("store.clock", "store.errors", "store.kinds")
MAX_TOP_LEVEL_MODULES = 20
MAX_SUBPACKAGE_LINES = 4000


def _store_rooms() -> list[Path]:
    return sorted(
        path
        for path in (REPO / "store").iterdir()
        if path.is_dir() and (path / "__init__.py").exists() and path.name != "migrations"
    )


def test_the_kernel_imports_nothing_else_and_prompts_only_the_kernel() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    first_party = ("store", "secretary", "prompts")

    from_kernel = {
        (module, imported)
        for module in KERNEL
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] in first_party
    }
    from_prompts = {
        imported
        for module in graph.find_descendants("prompts") | {"prompts"}
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] == "store"
    }

    assert from_kernel == set()
    assert from_prompts <= set(KERNEL)


def test_store_shows_its_rooms() -> None:
    """A newcomer sees the floor plan: few modules at the top, sub-packages of moderate size,
    each saying what it is and what it may import."""
    top = sorted(path.name for path in (REPO / "store").glob("*.py") if path.name != "__init__.py")
    sizes = {
        room.name: sum(len(p.read_text(encoding="utf-8").splitlines()) for p in room.rglob("*.py"))
        for room in _store_rooms()
    }
    undocumented = [
        room.name
        for room in _store_rooms()
        if len(doc := (ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or "")) < 80
        or "import" not in doc.lower()
    ]

    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    assert {room for room, lines in sizes.items() if lines > MAX_SUBPACKAGE_LINES} == set(), sizes
    assert undocumented == []


def test_a_memory_row_is_made_in_one_place() -> None:
    """New memories are made by ``store.write.apply.new_memory`` only; elsewhere a ``Memory`` is
    only rebuilt from a stored image (``Memory(**values)``)."""
    makers = []
    for path in (REPO / "store").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Memory"
                and any(keyword.arg is not None for keyword in node.keywords)
            ):
                makers.append(f"{path.relative_to(REPO)}:{node.lineno}")

    assert len(makers) == 1, makers
    assert makers[0].startswith("store/write/apply.py:"), makers
