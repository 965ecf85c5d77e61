"""The version is written once, as ``prefixroute.__version__``; everything else derives it or,
where a literal is unavoidable, agrees with it.

pyproject.toml reads it (``dynamic``), the operator tags the images it runs with it, and the
Dockerfile's label takes it as a build argument. Helm needs literals in Chart.yaml and kustomize
in the base Deployment's image, so those two are checked here against the one source.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from prefixroute import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_is_a_plain_release_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_pyproject_reads_the_version_from_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "prefixroute.__version__"}


def test_the_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "prefixroute" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_kustomize_base_runs_the_image_of_this_version() -> None:
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"prefixroute/prefixroute:{__version__}"
