"""Faults of the control plane and of our own pods, on the local real control plane.

- A router container killed (SIGKILL of its process; the pod runner restarts it as a
  kubelet would) comes back serving the ring from status.ring with nothing done by hand.
- The API server restarted while clients call the router: no request fails (the data plane
  never waits on the control plane), and the router's watch reconnects by itself — a scale
  made after the restart reaches it.
- The operator killed in the middle of a reconcile (frozen the moment its first child
  appears, then SIGKILLed), and the API server restarted while it comes back: the model
  converges to exactly its children — one of each, each owned by the resource, no second
  ReplicaSet, no stray pod — and deleting it leaves nothing behind.

Prometheus down with autoscaling on (replicas held, MetricsAvailable=False, then recovery)
is e2e/test_autoscaling.py. Times are printed, never asserted.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e import layout, lifecycle, product
from e2e.conftest import Cluster
from e2e.kube import ApiError, Kube

CHILDREN = {
    ("Deployment", "{n}-engine"),
    ("Deployment", "{n}-router"),
    ("Service", "{n}-engine"),
    ("Service", "{n}-router"),
    ("ServiceAccount", "{n}-router"),
    ("Role", "{n}-router"),
    ("RoleBinding", "{n}-router"),
    ("PodDisruptionBudget", "{n}-engine"),
}
LISTS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}


def container_pid(pod: dict[str, Any]) -> int:
    """The process of a pod's (only) container: the pod runner reports it as its container ID."""
    (status,) = pod["status"]["containerStatuses"]
    scheme, _, pid = status["containerID"].partition("://")
    assert scheme == "prefixroute", status
    return int(pid)


def restarts(pod: dict[str, Any]) -> int:
    return int(pod["status"]["containerStatuses"][0].get("restartCount", 0))


def children(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    out = []
    for kind in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget"):
        for item in kube.get(LISTS[kind].format(ns=namespace))["items"]:
            if (item["metadata"].get("labels") or {}).get(product.MODEL_LABEL) == name:
                out.append({**item, "kind": kind})
    return out


def names(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_a_killed_router_container_comes_back_with_the_ring(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("rr", replicas=2))
    prm = product.wait_serving(kube, namespace, "rr", 2)
    (pod,) = product.live(product.pods(kube, namespace, "rr", "router"))
    router = product.router_url(kube, namespace, "rr")
    assert product.completion(router, "before " * 50)[0] == 200
    started = time.monotonic()
    os.kill(container_pid(pod), signal.SIGKILL)  # a process of this session's own cluster
    product.wait_until(
        lambda: restarts(kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")),
        60,
        0.1,
        what="the router container restarted",
    )

    def ready() -> dict[str, Any] | None:
        status, _, body = product.http("GET", router + "/ready", timeout=2)
        return __import__("json").loads(body) if status == 200 else None

    answer = product.wait_until(ready, 120, 0.1, what="the restarted router ready")
    back = time.monotonic() - started
    assert answer["members"] == 2
    assert answer["ring_version"] == prm["status"]["ring"]["version"]
    members = {product.completion(router, f"after {i} " * 50)[1] for i in range(30)}
    assert members == product.ring_pods(prm)  # every ring member serves through the new process
    say(f"router container SIGKILLed: restarted and serving the ring of 2 again after {back:.1f}s")


def test_an_api_server_restart_drops_no_request_and_the_watch_resumes(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], kubectl: Any, say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("watched", replicas=2))
    product.wait_serving(kube, namespace, "watched", 2)
    router = product.router_url(kube, namespace, "watched")
    c = layout.Cluster.from_env(cluster.name)
    with product.ClientLoop(router, prompts=100_000) as clients:
        clients.wait_for_requests(20)
        started = time.monotonic()
        lifecycle.restart_daemon(c, "kube-apiserver", down_seconds=3.0)
        outage = time.monotonic() - started
        clients.wait_for_requests(20)
        # The router's watch came back on its own: a new member reaches it.
        kubectl("scale", "prm", "watched", "-n", namespace, "--replicas", "3")
        prm = product.wait_serving(kube, namespace, "watched", 3, timeout=180)
        product.wait_until(
            lambda: set(clients.members) >= product.ring_pods(prm),
            60,
            0.1,
            what="requests on all 3 members, the new one included",
        )
    say(
        f"API server down for {outage:.1f}s: {clients.ok} requests, {len(clients.failures)} failed; "
        f"the watch resumed (a scale to 3 reached the router)"
    )
    assert clients.failures == [], clients.failures[:5]


def test_operator_killed_mid_reconcile_and_api_server_restarted_converge(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    pid = container_pid(operator)
    before = restarts(operator)
    expected = {(kind, pattern.format(n="crash")) for kind, pattern in CHILDREN}
    product.create_model(kube, namespace, product.sim_model("crash", replicas=3))
    # Freeze the operator the moment its first child exists: a reconcile is under way.
    product.wait_until(lambda: children(kube, namespace, "crash"), 120, 0.005, what="the first child")
    os.kill(pid, signal.SIGSTOP)
    at_kill = names(children(kube, namespace, "crash"))
    os.kill(pid, signal.SIGKILL)
    c = layout.Cluster.from_env(cluster.name)
    started = time.monotonic()
    lifecycle.restart_daemon(c, "kube-apiserver", down_seconds=2.0)

    prm = product.wait_serving(kube, namespace, "crash", 3, timeout=300)
    converged = time.monotonic() - started
    ops = product.wait_until(
        lambda: [p for p in product.operator_pods(kube) if product.pod_ready(p)], 120, what="the operator Ready again"
    )
    assert restarts(ops[0]) > before  # it really was killed and restarted

    kids = children(kube, namespace, "crash")
    assert sorted(names(kids)) == sorted(expected)
    assert len(kids) == len(expected)  # one of each, nothing else
    uid = prm["metadata"]["uid"]
    for kid in kids:
        refs = [r for r in kid["metadata"].get("ownerReferences") or [] if r.get("controller")]
        assert [(r["kind"], r["uid"]) for r in refs] == [("PrefixRoutedModel", uid)], kid["metadata"]
    # one ReplicaSet per Deployment (the pod template never changed), every pod owned by one
    rsets = [
        r
        for r in kube.get(LISTS["ReplicaSet"].format(ns=namespace))["items"]
        if (r["metadata"].get("labels") or {}).get(product.MODEL_LABEL) == "crash"
    ]
    assert sorted(r["metadata"]["ownerReferences"][0]["name"] for r in rsets) == ["crash-engine", "crash-router"]
    pods = product.live(kube.get(LISTS["Pod"].format(ns=namespace))["items"])
    assert len(pods) == 4
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in pods} == {r["metadata"]["uid"] for r in rsets}
    assert prm["status"]["observedGeneration"] == prm["metadata"]["generation"]
    assert product.condition(prm, "Degraded").get("status") == "False"
    say(
        f"operator frozen then killed with {len(at_kill)}/{len(expected)} children applied "
        f"({', '.join(sorted(k for k, _ in at_kill))}), API server restarted: converged after {converged:.1f}s "
        f"to exactly {len(kids)} children, 2 ReplicaSets, 4 pods"
    )

    kube.delete(product.prm_path(namespace, "crash"))

    def leftovers() -> list[str]:
        left = []
        for kind, path in LISTS.items():
            for item in kube.get(path.format(ns=namespace))["items"]:
                if (item["metadata"].get("labels") or {}).get(product.MODEL_LABEL) == "crash":
                    left.append(f"{kind}/{item['metadata']['name']}")
        return left

    product.wait_until(lambda: not leftovers(), 180, 0.5, what="every child gone after the delete")
    with pytest.raises(ApiError) as gone:
        kube.get(product.prm_path(namespace, "crash"))
    assert gone.value.status == 404
