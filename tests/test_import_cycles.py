"""No two modules of operator/prefixroute or e2e/ import each other, however indirectly.

A circle of imports works only while the modules happen to be imported in the right order,
and the usual way to make one work — an import moved into a function or under
TYPE_CHECKING — only hides it from the reader. So every import counts here: at module level, inside functions, under ``if TYPE_CHECKING:``. The graph is
read from the source with ``ast`` (nothing is imported), and a circle is a strongly
connected component of more than one module.

An import names one module: ``import a.b`` and ``from a import b`` (b a module) point at
``a.b``, ``from a.b import name`` at ``a.b``. The package ``__init__`` files Python runs on
the way are left out: with them, a package that imports its own submodules would make a
circle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"prefixroute": REPO / "operator" / "prefixroute", "e2e": REPO / "e2e"}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int


def module_files(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Every module under each root, by dotted name (a package by its own name)."""
    out = {}
    for package, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """``name`` if it is one of ``modules``, else its nearest enclosing one, else None."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def imports_of(module: str, modules: Mapping[str, Path]) -> Iterator[Import]:
    """The imports of ``module`` that point at another module of ``modules``, wherever
    they are written in its file."""
    path = modules[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package[: len(package) - node.level + 1]
                base = ".".join([*above, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else _known(base, modules))
        for target in targets:
            if target is not None and target != module:
                yield Import(module, target, node.lineno)


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def import_circles(roots: Mapping[str, Path]) -> list[list[Import]]:
    """Each circle among the modules under ``roots``, as the imports that close it."""
    modules = module_files(roots)
    imports = list(dict.fromkeys(imp for module in modules for imp in imports_of(module, modules)))
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for imp in imports:
        graph[imp.source].add(imp.target)
    return [[imp for imp in imports if imp.source in members and imp.target in members] for members in circles(graph)]


def describe(circle: list[Import], roots: Mapping[str, Path]) -> str:
    files = module_files(roots)
    lines = [f"  {files[i.source].relative_to(REPO)}:{i.line} imports {i.target}" for i in circle]
    return "\n".join(lines)


def test_no_module_of_operator_or_e2e_imports_itself_through_others() -> None:
    found = import_circles(ROOTS)
    if found:
        report = "\n".join(f"circle {n}:\n{describe(c, ROOTS)}" for n, c in enumerate(found, 1))
        pytest.fail(f"{len(found)} import circle(s):\n{report}", pytrace=False)


# The checker itself: each way of hiding an import is still seen.


def _package(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Path]:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return {"pkg": root}


def _circle_members(roots: Mapping[str, Path]) -> list[set[str]]:
    return [{i.source for i in circle} for circle in import_circles(roots)]


def test_a_circle_through_a_function_and_type_checking_is_found(tmp_path: Path) -> None:
    roots = _package(
        tmp_path,
        {
            "a.py": "def f():\n    from pkg import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n",
            "c.py": "import pkg.a\nclass C: ...\n",
            "d.py": "from pkg import a, b, c\n",
        },
    )
    assert _circle_members(roots) == [{"pkg.a", "pkg.b", "pkg.c"}]


def test_relative_imports_resolve_from_modules_and_packages(tmp_path: Path) -> None:
    roots = _package(
        tmp_path,
        {
            "sub/__init__.py": "from .x import X\n",
            "sub/x.py": "from ..top import T\nclass X: ...\n",
            "top.py": "from .sub import x\nclass T: ...\n",
        },
    )
    circle = import_circles(roots)
    assert [sorted((i.source, i.target) for i in c) for c in circle] == [
        [("pkg.sub.x", "pkg.top"), ("pkg.top", "pkg.sub.x")]
    ]


def test_imports_in_one_direction_are_no_circle(tmp_path: Path) -> None:
    roots = _package(
        tmp_path,
        {
            "a.py": "from pkg.b import B\nimport pkg.c\n",
            "b.py": "from pkg import c\nclass B: ...\n",
            "c.py": "import os\n",
        },
    )
    assert import_circles(roots) == []
