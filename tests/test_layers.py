"""The package's import graph: no circles, and no layer imports one above it.

Type-only imports (under `if TYPE_CHECKING:`) are left out: they name a type for the
checker and run nothing. Imports inside functions count: they run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "pytest_llmtool"

# Lowest first. A module may import its own layer and those listed before it.
LAYERS: list[tuple[str, ...]] = [
    ("pytest_llmtool", "pytest_llmtool.records", "pytest_llmtool.inputs"),
    ("pytest_llmtool.stats", "pytest_llmtool.trajectory"),
    ("pytest_llmtool.sandbox",),
    ("pytest_llmtool.agents",),
    ("pytest_llmtool.settings",),
    ("pytest_llmtool.report",),
    ("pytest_llmtool.kinds",),
    ("pytest_llmtool.gaps", "pytest_llmtool.history"),
    ("pytest_llmtool.run",),
    ("pytest_llmtool.hookspecs", "pytest_llmtool.plugin", "pytest_llmtool.cli"),
]
# What may sit at the top of the package: the entry points and the record.
TOP_LEVEL = {"__init__", "records", "settings", "hookspecs", "plugin", "cli"}


def module_name(path: Path) -> str:
    parts = ["pytest_llmtool", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except what sits under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports(path: Path) -> set[str]:
    """The project modules `path` imports when it runs."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pytest_llmtool")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if not base.startswith("pytest_llmtool"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return found - {name}


MODULES = {module_name(p) for p in ROOT.rglob("*.py")}
GRAPH = {module_name(p): imports(p) for p in ROOT.rglob("*.py")}


def layer(module: str) -> int:
    """The index of the most specific layer prefix naming `module`."""
    best, index = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if layer(m) < 0)
    assert not unplaced


def test_no_module_imports_a_higher_layer() -> None:
    upward = sorted(
        f"{m} -> {target}"
        for m, targets in GRAPH.items()
        for target in targets
        if layer(target) > layer(m)
    )
    assert not upward


def test_no_import_circles() -> None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            pytest.fail("import circle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(GRAPH.get(module, ())):
            # Importing `a.b` runs the package `a` first.
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(GRAPH):
        visit(module)


def test_the_top_level_holds_only_entry_points_and_the_record() -> None:
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top == TOP_LEVEL


def test_every_package_says_what_it_owns_and_may_import() -> None:
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc or init.parent.parent != ROOT, init
