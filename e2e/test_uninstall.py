"""Deleting everything at once leaves nothing Terminating.

``kubectl delete -k manifests/overlays/all-namespaces --ignore-not-found`` removes the operator, its namespace
and the CRDs in one go, while models still exist — one with autoscaling on (which an earlier
release gave kopf's finalizer, through its timer), one without, and one still carrying that
release's finalizer. The operator needs no finalizer any more (its periodic work runs in its
own loop over the models), and it takes the old one off where it finds it, so the models
go with their CRD, the operator's namespace and the models' namespace go too, and nothing
waits for a finalizer no one will remove.
"""

from __future__ import annotations

from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube
from e2e.waiting import absent

LEGACY_FINALIZER = "prefixroute.io/autoscaler"


def _autoscaled(name: str, prometheus: str) -> dict[str, Any]:
    doc = product.sim_model(name, replicas=1)
    doc["spec"]["autoscaling"] = {
        "enabled": True,
        "prometheus": prometheus,
        "minReplicas": 1,
        "maxReplicas": 2,
        "intervalSeconds": 2,
    }
    return doc


def test_kubectl_delete_k_of_everything_leaves_nothing_terminating(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    product.install_operator(cluster.kubectl, kube)
    product.create_model(kube, namespace, _autoscaled("auto", cluster.prometheus))
    product.create_model(kube, namespace, product.sim_model("plain", replicas=1))
    legacy = _autoscaled("legacy", cluster.prometheus)
    legacy["metadata"]["finalizers"] = [LEGACY_FINALIZER]  # as an earlier release left it
    product.create_model(kube, namespace, legacy)
    for name in ("auto", "plain", "legacy"):
        product.wait_serving(kube, namespace, name, 1)
    # the autoscaler works on both autoscaled models (its loop reads their signals) ...
    for name in ("auto", "legacy"):
        product.wait_until(
            lambda name=name: product.condition(product.get_model(kube, namespace, name), "MetricsAvailable"),
            60,
            0.5,
            what=f"{name}: the autoscaler's MetricsAvailable condition",
        )
    # ... and no model carries a finalizer: the old one is taken off
    product.wait_until(
        lambda: not product.get_model(kube, namespace, "legacy")["metadata"].get("finalizers"),
        60,
        0.5,
        what="the earlier release's finalizer removed",
    )
    assert not product.get_model(kube, namespace, "auto")["metadata"].get("finalizers")

    # --ignore-not-found: the peering object goes with its CRD in the same command, and
    # kubectl would report that as an error when it reaches the object itself
    deleted = cluster.kubectl("delete", "-k", str(product.OVERLAY), "--ignore-not-found", "--wait=false", timeout=120)
    assert "customresourcedefinition.apiextensions.k8s.io" in deleted.stdout, deleted.stdout
    kube.delete(f"/api/v1/namespaces/{namespace}")
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{product.CRDS[0]}"
    product.wait_until(
        lambda: (
            absent(kube, crd)
            and absent(kube, f"/api/v1/namespaces/{product.SYSTEM_NAMESPACE}")
            and absent(kube, f"/api/v1/namespaces/{namespace}")
        ),
        180,
        0.5,
        what="the CRD, the operator's namespace and the models' namespace gone",
    )
