"""Render the chart with helm and read the objects back (cached: each value set renders once)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.chart import tools

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "prefixroute"
NAMESPACE = "prefixroute-system"
MONITORING_API = "monitoring.coreos.com/v1"


class HelmError(Exception):
    """helm refused: the message is its stderr."""


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([tools.helm(), *args], capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise HelmError(out.stderr.strip())
    return out


@cache
def _template(values_json: str, api_versions: tuple[str, ...], kube_version: str, release: str) -> tuple[str, ...]:
    args = ["template", release, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version, "--values", "-"]
    for api in api_versions:
        args += ["--api-versions", api]
    out = subprocess.run([tools.helm(), *args], input=values_json, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise HelmError(out.stderr.strip())
    return tuple(json.dumps(d, sort_keys=True) for d in yaml.safe_load_all(out.stdout) if d)


def template(
    values: dict[str, Any] | None = None,
    *,
    monitoring: bool = False,
    kube_version: str = "1.35.0",
    release: str = "prefixroute",
) -> list[dict[str, Any]]:
    """`helm template` with these values (JSON is YAML), optionally as if the Prometheus
    Operator's API were served; a fresh copy of the objects each call."""
    apis = (MONITORING_API,) if monitoring else ()
    docs = _template(json.dumps(values or {}, sort_keys=True), apis, kube_version, release)
    return [json.loads(d) for d in docs]


def kinds(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, kinds(docs))
    return found[0]


def every(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
