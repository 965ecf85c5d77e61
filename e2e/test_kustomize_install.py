"""Installing with kustomize, as docs/install.md says: `kubectl apply --server-side -k` of
each overlay works on the real API server in one go, a second apply changes nothing
(`kubectl diff --server-side` exits 0), the operator becomes Ready, and in the
all-namespaces overlay it reconciles the engine-sim example. Uninstall with
`kubectl delete -k ... --ignore-not-found` leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e import pins
from e2e.conftest import Cluster, wait_for
from e2e.crd_deletion import CRDS_PATH, crds_gone
from e2e.kube import Kube
from e2e.waiting import absent

MANIFESTS = pins.REPO_ROOT / "manifests"
OPERATOR = "/apis/apps/v1/namespaces/prefixroute-system/deployments/prefixroute-operator"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/prefixroutedmodels.prefixroute.io"


def _left_behind(kube: Kube) -> list[str]:
    """What of the install is still there while it is being deleted: the operator's namespace
    and the CRDs, each with its deletion time, finalizers and conditions."""
    namespace = "/api/v1/namespaces/prefixroute-system"
    objects = [] if absent(kube, namespace) else [kube.get(namespace)]
    objects += [
        crd
        for crd in kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        if crd["spec"]["group"] in ("prefixroute.io", "kopf.dev")
    ]
    found = []
    for obj in objects:
        meta = obj["metadata"]
        conditions = [
            f"{c['type']}={c['status']} ({c.get('reason', '')}: {c.get('message', '')})"
            for c in obj.get("status", {}).get("conditions", [])
            if c.get("status") == "True" or c["type"].endswith("Failure")
        ]
        found.append(
            # a list's items carry no kind: only the namespace was read by itself
            f"{obj.get('kind', 'CustomResourceDefinition')} {meta['name']}: deleting since {meta.get('deletionTimestamp')}, "
            f"finalizers {meta.get('finalizers')}, {conditions}"
        )
    return found


def _uninstall(cluster: Cluster, kube: Kube, overlay: Path) -> None:
    cluster.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=false", timeout=120)
    crds = [
        crd["metadata"]["name"]
        for crd in kube.get(CRDS_PATH)["items"]
        if crd["spec"]["group"] in ("prefixroute.io", "kopf.dev")
    ]

    def nothing_left() -> bool:
        # crds_gone nudges a CRD whose finalizer backs off (e2e/crd_deletion.py says why)
        left = [] if crds_gone(kube, crds) else _left_behind(kube)
        left += [] if absent(kube, "/api/v1/namespaces/prefixroute-system") else _left_behind(kube)
        if left:
            raise AssertionError("\n".join(dict.fromkeys(left)))  # wait_for reports the last of these on timeout
        return True

    wait_for(nothing_left, 180, what="the CRDs (ours and kopf's) and prefixroute-system to be deleted")


def _available(kube: Kube) -> dict[str, Any] | None:
    deployment = kube.get(OPERATOR)
    status = deployment.get("status", {})
    return deployment if status.get("availableReplicas", 0) >= deployment["spec"]["replicas"] else None


def ready_condition(model: dict[str, Any]) -> dict[str, Any] | None:
    for condition in model.get("status", {}).get("conditions", []):
        if condition["type"] == "Ready":
            return condition
    return None


@pytest.mark.parametrize("overlay_name", ["all-namespaces", "single-namespace"])
def test_server_side_apply_works_and_a_second_apply_changes_nothing(
    cluster: Cluster, kube: Kube, overlay_name: str, namespace: str
) -> None:
    overlay = MANIFESTS / "overlays" / overlay_name
    if not absent(kube, CRD):  # a previous run or another test left an install behind
        _uninstall(cluster, kube, overlay)
    try:
        first = cluster.kubectl("apply", "--server-side", "-k", str(overlay), timeout=120)
        assert (
            "customresourcedefinition.apiextensions.k8s.io/prefixroutedmodels.prefixroute.io serverside-applied"
            in first.stdout
        )
        assert "deployment.apps/prefixroute-operator serverside-applied" in first.stdout
        # idempotent: nothing differs from what the server holds, and applying again keeps every object as it was
        diff = cluster.kubectl("diff", "--server-side", "-k", str(overlay), check=False)
        assert diff.returncode == 0, diff.stdout + diff.stderr
        before = json.loads(cluster.kubectl("get", "-k", str(overlay), "-o", "json").stdout)["items"]
        cluster.kubectl("apply", "--server-side", "-k", str(overlay), timeout=120)
        after = json.loads(cluster.kubectl("get", "-k", str(overlay), "-o", "json").stdout)["items"]
        versions = {(o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in before}
        changed = [
            (o["kind"], o["metadata"]["name"])
            for o in after
            if o["kind"] != "ClusterKopfPeering"
            and o["kind"] != "KopfPeering"  # kopf writes its peers into these
            and versions[(o["kind"], o["metadata"]["name"])] != o["metadata"]["resourceVersion"]
        ]
        assert changed == []
        namespace_labels = kube.get("/api/v1/namespaces/prefixroute-system")["metadata"]["labels"]
        assert (
            namespace_labels["pod-security.kubernetes.io/enforce"] == "restricted"
        )  # and the operator pod was admitted
        deployment = wait_for(lambda: _available(kube), 90, what="the operator Deployment available")
        assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][0] == "operator"
        if overlay_name == "all-namespaces":
            cluster.kubectl(
                "apply", "--server-side", "-n", namespace, "-f", str(MANIFESTS / "examples" / "engine-sim-demo.yaml")
            )
            path = f"/apis/prefixroute.io/v1alpha1/namespaces/{namespace}/prefixroutedmodels/demo"
            # Ready turns True with the first engine in the ring; all three follow
            wait_for(
                lambda: (
                    (ready_condition(kube.get(path)) or {}).get("status") == "True"
                    and kube.get(path)["status"].get("readyReplicas") == 3
                ),
                120,
                what="the engine-sim example Ready with 3 replicas",
            )
    finally:
        _uninstall(cluster, kube, overlay)
