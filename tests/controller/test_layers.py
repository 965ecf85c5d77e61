"""The pure layers import neither kopf nor the Kubernetes client (STYLE.md: builders of
Kubernetes objects import no client); only edge, handlers and cli may."""

import ast
from pathlib import Path

import pytest

import prefixroute.controller as controller

PACKAGE = Path(controller.__file__).parent
EDGES = {"edge.py", "handlers.py", "cli.py"}
FORBIDDEN = (
    "kopf",
    "kubernetes",
    "pykube",
    "aiohttp",
    "prometheus_api_client",
    "prefixroute.controller.edge",
    "prefixroute.controller.handlers",
    "prefixroute.router",
)


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


PURE = sorted(p for p in PACKAGE.rglob("*.py") if p.name not in EDGES)


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_modules_import_no_client(path: Path) -> None:
    bad = {n for n in imports(path) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)}
    assert not bad, f"{path.name} imports {bad}"


def test_the_package_is_not_named_operator() -> None:
    assert PACKAGE.name == "controller"
