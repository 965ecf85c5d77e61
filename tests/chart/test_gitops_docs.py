"""docs/gitops.md and docs/install.md say what really works: every YAML block parses, the
paths they point at exist, chart values they set pass values.schema.json and render, and
the Argo CD (Lua) and Flux (CEL) health checks give the right health for each state a
PrefixRoutedModel can be in."""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart import tools
from tests.chart.render import CHART, ROOT, template

GITOPS = ROOT / "docs" / "gitops.md"
INSTALL = ROOT / "docs" / "install.md"
PROJECT_REPO = "https://github.com/prefixroute/prefixroute.git"
VALUES_SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def yaml_blocks(path: Path) -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def shell_lines(path: Path) -> list[str]:
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", path.read_text(), flags=re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith(("helm ", "kubectl ")):
                lines.append(line)
    return lines


DOCS = yaml_blocks(GITOPS)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in DOCS if d.get("kind") == kind]


def test_gitops_doc_has_argo_cd_and_flux_objects() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in DOCS}
    assert {
        ("argoproj.io/v1alpha1", "Application"),
        ("v1", "ConfigMap"),
        ("source.toolkit.fluxcd.io/v1", "GitRepository"),
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    } <= kinds
    paths = {
        d["spec"]["source"]["path"] for d in of_kind("Application") if d["spec"]["source"]["repoURL"] == PROJECT_REPO
    }
    assert paths == {"charts/prefixroute", "manifests/overlays/all-namespaces"}  # the chart and the kustomize base


@pytest.mark.parametrize("where", ["argo", "flux"])
def test_chart_values_in_the_doc_pass_the_schema_and_render(where: str) -> None:
    if where == "argo":
        (app,) = [a for a in of_kind("Application") if a["spec"]["source"]["path"] == "charts/prefixroute"]
        values = app["spec"]["source"]["helm"]["valuesObject"]
        assert {"ServerSideApply=true", "CreateNamespace=true"} <= set(app["spec"]["syncPolicy"]["syncOptions"])
    else:
        (release,) = of_kind("HelmRelease")
        assert (ROOT / release["spec"]["chart"]["spec"]["chart"]).resolve() == CHART
        assert release["spec"]["install"]["crds"] == release["spec"]["upgrade"]["crds"] == "CreateReplace"
        values = release["spec"]["values"]
    assert list(jsonschema.Draft7Validator(VALUES_SCHEMA).iter_errors(values)) == []
    assert template(values, monitoring=True)


def test_paths_in_the_doc_exist() -> None:
    for app in of_kind("Application"):
        source = app["spec"]["source"]
        if source["repoURL"] == PROJECT_REPO:
            assert (ROOT / source["path"]).is_dir(), source["path"]
    for kustomization in of_kind("Kustomization"):
        if kustomization["spec"]["sourceRef"]["name"] == "prefixroute":
            assert (ROOT / kustomization["spec"]["path"] / "kustomization.yaml").is_file()


# -- the health checks ------------------------------------------------------------------------


def _model(*conditions: tuple[str, str, str], generation: int = 2, observed: int | None = 2) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s, "reason": r, "message": f"{t} {r}"} for t, s, r in conditions]
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "apiVersion": "prefixroute.io/v1alpha1",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": "m", "namespace": "serving", "generation": generation},
        "spec": {},
        "status": status,
    }


SERVING = ("Ready", "True", "Serving"), ("Progressing", "False", "Complete"), ("Degraded", "False", "Reconciled")
STATES = [
    # (id, object, Argo CD health, Flux health)
    (
        "no-status",
        {
            "apiVersion": "prefixroute.io/v1alpha1",
            "kind": "PrefixRoutedModel",
            "metadata": {"name": "m", "generation": 1},
            "spec": {},
        },
        "Progressing",
        "InProgress",
    ),
    ("serving", _model(*SERVING), "Healthy", "Current"),
    ("old-generation", _model(*SERVING, generation=3, observed=2), "Progressing", "InProgress"),
    (
        "rolling-out",
        _model(
            ("Ready", "True", "Serving"), ("Progressing", "True", "RollingOut"), ("Degraded", "False", "Reconciled")
        ),
        "Progressing",
        "InProgress",
    ),
    (
        "waiting",
        _model(("Ready", "False", "NoReadyEngines"), ("Progressing", "True", "WaitingForReady")),
        "Progressing",
        "InProgress",
    ),
    (
        "invalid-spec",
        _model(
            ("Ready", "False", "NoReadyEngines"),
            ("Progressing", "False", "Complete"),
            ("Degraded", "True", "InvalidSpec"),
        ),
        "Degraded",
        "Failed",
    ),
    (
        "router-down",
        _model(
            ("Ready", "False", "RouterNotReady"),
            ("Progressing", "False", "Complete"),
            ("Degraded", "False", "Reconciled"),
        ),
        "Degraded",
        None,
    ),
    (
        "scaled-to-zero",
        _model(
            ("Ready", "False", "ScaledToZero"),
            ("Progressing", "False", "Complete"),
            ("Degraded", "False", "Reconciled"),
        ),
        "Suspended",
        "Current",
    ),
]


def argo_lua() -> str:
    (cm,) = of_kind("ConfigMap")
    assert cm["metadata"]["name"] == "argocd-cm"
    return str(cm["data"]["resource.customizations.health.prefixroute.io_PrefixRoutedModel"])


@pytest.mark.parametrize(("obj", "health"), [(o, a) for _, o, a, _ in STATES], ids=[i for i, *_ in STATES])
def test_argo_cd_health_check(obj: dict[str, Any], health: str) -> None:
    """Argo CD runs the script with the resource as the global `obj`; here, as its argument."""
    lupa = tools.module("lupa")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    check = lua.execute(f"return function(obj)\n{argo_lua()}\nend")
    result = check(lua.table_from(copy.deepcopy(obj), recursive=True))
    assert result["status"] == health
    assert result["message"]


def _flux_health(obj: dict[str, Any]) -> str | None:
    """Flux's order: inProgress, then failed, then current; an expression that cannot be
    evaluated (a field missing) leaves the resource in progress until the timeout."""
    import celpy

    (kustomization,) = [k for k in of_kind("Kustomization") if k["spec"].get("healthCheckExprs")]
    (exprs,) = kustomization["spec"]["healthCheckExprs"]
    assert (exprs["apiVersion"], exprs["kind"]) == ("prefixroute.io/v1alpha1", "PrefixRoutedModel")
    env = celpy.Environment()
    activation = {k: celpy.json_to_cel(v) for k, v in obj.items()}
    for key, health in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        result = env.program(env.compile(exprs[key])).evaluate(activation)
        if isinstance(result, Exception):
            return "InProgress"
        if bool(result):
            return health
    return None  # no expression matched: Flux keeps waiting, then reports the timeout


@pytest.mark.parametrize(("obj", "health"), [(o, f) for _, o, _, f in STATES], ids=[i for i, *_ in STATES])
def test_flux_health_check(obj: dict[str, Any], health: str | None) -> None:
    try:
        found = _flux_health(copy.deepcopy(obj))
    except Exception:  # celpy raises for a missing top-level field; Flux keeps such a resource in progress
        found = "InProgress"
    assert found == health


# -- docs/install.md ------------------------------------------------------------------------


def test_install_doc_commands_point_at_real_paths_and_values() -> None:
    lines = shell_lines(INSTALL)
    assert any(line.startswith("helm install") for line in lines)
    assert any("apply --server-side -k manifests/overlays/all-namespaces" in line for line in lines)
    for line in lines:
        words = shlex.split(line)
        for word in words:
            if word.startswith(("charts/", "manifests/", "crds")):
                assert (ROOT / word.rstrip("/")).exists(), f"{line}: {word} does not exist"
        if words[:2] in (["helm", "install"], ["helm", "upgrade"], ["helm", "template"]):
            sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
            values: dict[str, Any] = {}
            for assignment in sets:
                key, _, value = assignment.partition("=")
                node = values
                *parents, leaf = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = (
                    [v for v in value.strip("{}").split(",") if v] if value.startswith("{") else yaml.safe_load(value)
                )
            assert list(jsonschema.Draft7Validator(VALUES_SCHEMA).iter_errors(values)) == [], line
            assert template(values), line
