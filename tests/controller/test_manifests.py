"""manifests/: every object valid (built-ins against Kubernetes' schemas, PrefixRoutedModels
against the CRD and its CEL rules, and the children they render), the overlays build with
kustomize, and the operator's RBAC covers what it does (and what it grants routers)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from prefixroute.cache_folder import cache_dir
from prefixroute.controller.builders.rbac import router_role
from prefixroute.controller.plan import plan_for
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import API_VERSION
from tests.controller.schema import ROOT, admit, kubernetes_errors

MANIFESTS = ROOT / "manifests"
EXAMPLES = sorted((MANIFESTS / "examples").glob("*.yaml"))
PLAIN = sorted(p for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml" and "examples" not in p.parts)


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kubectl() -> str | None:
    found = shutil.which("kubectl")
    if found:
        return found
    cache = cache_dir() / "bin"
    candidates = sorted(cache.glob("kubectl-*/kubectl")) if cache.is_dir() else []
    return str(candidates[-1]) if candidates else None


def test_the_four_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "vllm-llama-3.1-8b.yaml",
        "vllm-llama-3.1-70b-tp8.yaml",
        "engine-sim-demo.yaml",
        "multi-tenant.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_admitted_and_render_valid_children(path: Path) -> None:
    models = 0
    for doc in documents(path):
        if doc["apiVersion"] != API_VERSION:
            assert kubernetes_errors(doc) == [], doc["kind"]
            continue
        models += 1
        stored, errors = admit(doc)
        assert errors == [], errors
        stored["metadata"].update(namespace="serving", uid="uid", generation=1)
        for child in plan_for(stored).objects:
            assert kubernetes_errors(child) == [], (child["kind"], child["metadata"]["name"])
    assert models == 1


def test_the_70b_example_is_tensor_parallel_with_shm_cache_token_and_tolerations() -> None:
    doc = next(
        d for d in documents(MANIFESTS / "examples" / "vllm-llama-3.1-70b-tp8.yaml") if d["kind"] == "PrefixRoutedModel"
    )
    stored, _ = admit(doc)
    stored["metadata"].update(namespace="serving", uid="uid", generation=1)
    pod = next(
        o for o in plan_for(stored).objects if o["metadata"]["name"] == "llama-70b-engine" and o["kind"] == "Deployment"
    )
    spec = pod["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert "--tensor-parallel-size" in container["args"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert any(v.get("persistentVolumeClaim") for v in spec["volumes"])
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token-env"}}]
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


@pytest.mark.parametrize("path", PLAIN, ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_install_manifests_are_valid(path: Path) -> None:
    for doc in documents(path):
        if doc["apiVersion"].startswith("kopf.dev/"):
            continue  # kopf's own resources: checked by their CRD in e2e
        assert kubernetes_errors(doc) == [], (path.name, doc["kind"])


def _rules(path: Path, kind: str) -> list[dict]:
    return next(d for d in documents(path) if d["kind"] == kind)["rules"]


def _allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        (MANIFESTS / "overlays" / "all-namespaces" / "rbac.yaml", "ClusterRole"),
        (MANIFESTS / "overlays" / "single-namespace" / "rbac.yaml", "Role"),
    ],
)
def test_operator_rbac_covers_the_plan_and_what_it_grants_routers(path: Path, kind: str) -> None:
    rules = _rules(path, kind)
    groups = {
        "v1": "",
        "apps/v1": "apps",
        "policy/v1": "policy",
        "rbac.authorization.k8s.io/v1": "rbac.authorization.k8s.io",
        "inference.networking.k8s.io/v1": "inference.networking.k8s.io",
        "networking.k8s.io/v1": "networking.k8s.io",
        "batch/v1": "batch",
    }
    plural = {
        "ServiceAccount": "serviceaccounts",
        "Service": "services",
        "Deployment": "deployments",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "InferencePool": "inferencepools",
        "NetworkPolicy": "networkpolicies",
        "PersistentVolumeClaim": "persistentvolumeclaims",
        "Job": "jobs",
    }
    engine = {"kind": "sim", "model": "x"}
    gateway_only = {"engine": engine, "gateway": {"enabled": True, "router": False}}
    meta = {"name": "m", "namespace": "ns"}
    for obj in plan_for({"metadata": meta, "spec": gateway_only}).objects:
        assert _allows(rules, groups[obj["apiVersion"]], plural[obj["kind"]], "patch"), obj["kind"]
    # A gateway turned off deletes its InferencePool; pickers and a router turned off are parked at
    # zero replicas (the operator holds no delete on Deployments).
    gateway_off = plan_for(
        {"metadata": meta, "spec": {"engine": engine}, "status": {"gateway": {"inferencePool": "m"}}}
    )
    assert "InferencePool" in [o["kind"] for o in gateway_off.absent]
    for obj in gateway_off.absent:
        assert _allows(rules, groups[obj["apiVersion"]], plural[obj["kind"]], "delete"), obj["kind"]
    assert not _allows(rules, "apps", "deployments", "delete")
    fenced = {"engine": engine, "networkPolicy": {"enabled": True}}
    for obj in plan_for({"metadata": meta, "spec": fenced}).objects:
        assert _allows(rules, groups[obj["apiVersion"]], plural[obj["kind"]], "patch"), obj["kind"]
    for obj in plan_for({"metadata": meta, "spec": {"engine": engine}}).absent:  # turned off: deleted
        assert _allows(rules, groups[obj["apiVersion"]], plural[obj["kind"]], "delete"), obj["kind"]
    cached = {"engine": {"kind": "sim"}, "model": {"hub": {"id": "org/m"}, "cache": {"size": "1Gi"}}}
    for obj in plan_for({"metadata": meta, "spec": cached}).objects:
        assert _allows(rules, groups[obj["apiVersion"]], plural[obj["kind"]], "patch"), obj["kind"]
    for verb in ("list", "watch"):  # status.modelCache follows the download Job
        assert _allows(rules, "batch", "jobs", verb)
    assert _allows(rules, "", "pods/log", "get")  # a download's progress, from its pod's log
    assert not _allows(rules, "", "pods/exec", "create")
    for verb in ("get", "list", "watch"):
        assert _allows(rules, "", "pods", verb)
        assert _allows(rules, "prefixroute.io", "prefixroutedmodels", verb)
    assert _allows(rules, "prefixroute.io", "prefixroutedmodels/status", "patch")
    assert _allows(rules, "", "pods", "patch")  # the autoscaler's pod-deletion-cost on the pod it drains
    assert _allows(
        rules, "prefixroute.io", "prefixroutedmodels", "patch"
    )  # kopf's finalizer for the autoscaler's timer
    assert _allows(rules, "", "events", "create")
    for resource in ("secrets", "configmaps"):  # a model's Prometheus CA (prometheusTLS.ca): one object by name
        assert _allows(rules, "", resource, "get")
        assert not [
            v for v in ("list", "watch", "create", "update", "patch", "delete") if _allows(rules, "", resource, v)
        ]
    for rule in router_role(ModelRef("m", "ns"))["rules"]:  # RBAC refuses to let it grant more than it holds
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                assert _allows(rules, rule["apiGroups"][0], resource, verb), (resource, verb)


KUBECTL = kubectl()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) not found")
@pytest.mark.parametrize(
    ("overlay", "flags"),
    [
        ("all-namespaces", ["--all-namespaces"]),
        ("single-namespace", ["--namespace", "prefixroute-models"]),
    ],
)
def test_overlays_build(overlay: str, flags: list[str]) -> None:
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(MANIFESTS / "overlays" / overlay)], check=True, capture_output=True, text=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "Deployment"} <= kinds
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "prefixroute-system"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["operator", "--peering", "prefixroute"]
    assert args[-len(flags) :] == flags
    crd_names = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert "prefixroutedmodels.prefixroute.io" in crd_names
    if overlay == "single-namespace":
        role = next(d for d in docs if d["kind"] == "Role")
        assert role["metadata"]["namespace"] == "prefixroute-models"
