"""Every module of operator/prefixroute with logic has a test module at the matching path.

Tests mirror the modules they test (as httpx's and starlette's do): `prefixroute/x/y.py` is
tested by `tests/x/test_y.py`, a package's `__init__.py` by `tests/test_<package>.py` beside the
package's own folder of tests. A module has logic when a function or method in it has a body
beyond a docstring, `...`, `pass` or a `raise`, or when a statement at its top level branches,
loops or handles errors; constants, dataclass fields, protocols and re-exports are not logic.
The modules are read with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "operator" / "prefixroute"
TESTS = REPO / "tests"
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.Match)


def _declares_only(body: list[ast.stmt]) -> bool:
    return all(
        isinstance(st, (ast.Pass, ast.Raise)) or (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))
        for st in body
    )


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def has_logic(source: str) -> bool:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _declares_only(node.body):
            return True
    return any(isinstance(st, _BRANCHES) and not _type_checking(st) for st in tree.body)


def mirror_of(module: Path) -> Path:
    relative = module.relative_to(PACKAGE)
    if relative.name == "__init__.py":
        return TESTS / relative.parent.parent / f"test_{relative.parent.name}.py"
    return TESTS / relative.parent / f"test_{relative.stem}.py"


@pytest.mark.parametrize(
    ("source", "logic"),
    [
        ('"""Constants."""\nA = 1\nB = f"{A}"\n', False),
        ("from a import b as b\n__all__ = ['b']\n", False),
        ("class P(Protocol):\n    def f(self) -> int:\n        '''doc'''\n        ...\n", False),
        ("@dataclass\nclass D:\n    x: int = 0\n", False),
        ("class E(Exception):\n    '''doc'''\n", False),
        ("if TYPE_CHECKING:\n    from a import b\n", False),
        ("def f():\n    return 1\n", True),
        ("class C:\n    def __init__(self):\n        self.x = 1\n", True),
        ("try:\n    import uvloop\nexcept ImportError:\n    uvloop = None\n", True),
    ],
)
def test_what_counts_as_logic(source: str, logic: bool) -> None:
    assert has_logic(source) is logic


def test_paths_mirror_the_modules() -> None:
    assert mirror_of(PACKAGE / "front" / "state.py") == TESTS / "front" / "test_state.py"
    assert mirror_of(PACKAGE / "front" / "membership" / "__init__.py") == TESTS / "front" / "test_membership.py"


def test_every_module_with_logic_has_a_test_module() -> None:
    missing = [
        f"{module.relative_to(REPO)} -> {mirror_of(module).relative_to(REPO)}"
        for module in sorted(PACKAGE.rglob("*.py"))
        if module.name != "__main__.py"
        and not mirror_of(module).exists()
        and has_logic(module.read_text(encoding="utf-8"))
    ]
    assert not missing, "modules with logic and no test module:\n" + "\n".join(missing)
