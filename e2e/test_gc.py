"""Deleting a PrefixRoutedModel removes every child through Kubernetes' garbage collector
(owner references; the operator has no deletion handler to run): Deployments,
ReplicaSets, pods and their processes, Services and EndpointSlices, the PDB, the router's
ServiceAccount, Role and RoleBinding. Nothing is orphaned — checked by the model label and
by owner references over every namespaced resource type the API server serves.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube

_NAME = "doomed"


def _namespaced_listables(kube: Kube) -> list[tuple[str, str]]:
    """(list path with {ns} to fill in, kind) of every namespaced resource type (discovery)."""
    paths = []
    groups = [("/api/v1", "v1")] + [
        (f"/apis/{v['groupVersion']}", v["groupVersion"])
        for g in kube.get("/apis")["groups"]
        for v in [g["preferredVersion"]]
    ]
    for base, _ in groups:
        for r in kube.get(base)["resources"]:
            if r["namespaced"] and "/" not in r["name"] and "list" in r.get("verbs", []):
                paths.append((f"{base}/namespaces/{{ns}}/{r['name']}", r["kind"]))
    return paths


def _everything(kube: Kube, namespace: str, paths: list[tuple[str, str]]) -> list[dict[str, Any]]:
    items = []
    for path, kind in paths:
        for item in kube.get(path.format(ns=namespace)).get("items", []):
            items.append({**item, "kind": kind})
    return items


def _describe(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{o.get('kind')}/{o['metadata']['name']}" for o in objs)


def test_deleting_the_resource_removes_every_child(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    prm = product.create_model(kube, namespace, product.sim_model(_NAME, replicas=2, router_replicas=2))
    product.wait_serving(kube, namespace, _NAME, 2)
    product.wait_until(
        lambda: sum(product.pod_ready(p) for p in product.pods(kube, namespace, _NAME, "router")) == 2,
        60,
        what="2 router pods Ready",
    )
    paths = _namespaced_listables(kube)
    everything = _everything(kube, namespace, paths)

    # What the operator made, by label: each owned by the resource, or by something it owns.
    labelled = [o for o in everything if (o["metadata"].get("labels") or {}).get(product.MODEL_LABEL) == _NAME]
    uids = {o["metadata"]["uid"]: o for o in labelled}
    uids[prm["metadata"]["uid"]] = prm
    descendants = _descendants(everything, prm["metadata"]["uid"])
    kinds = {o.get("kind") for o in descendants}
    for kind in (
        "Deployment",
        "ReplicaSet",
        "Pod",
        "Service",
        "EndpointSlice",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    ):
        assert kind in kinds, (kind, sorted(kinds))
    # v1 Endpoints copy their Service's labels and are removed with it by the endpoints
    # controller, not by owner reference; everything else labelled is owned.
    unowned = {o["metadata"]["uid"] for o in labelled if o["kind"] != "Endpoints"} - {
        o["metadata"]["uid"] for o in descendants
    }
    assert not unowned, [_describe([uids[u]]) for u in unowned]
    direct = [
        o for o in descendants if any(r["uid"] == prm["metadata"]["uid"] for r in o["metadata"]["ownerReferences"])
    ]
    for o in direct:
        (ref,) = [r for r in o["metadata"]["ownerReferences"] if r["uid"] == prm["metadata"]["uid"]]
        assert ref["kind"] == "PrefixRoutedModel", ref
        assert ref["name"] == _NAME, ref
        assert ref.get("controller") is True, ref
    engine_urls = list(product.engine_urls(product.get_model(kube, namespace, _NAME)).values())
    router_ips = [p["status"]["podIP"] for p in product.pods(kube, namespace, _NAME, "router")]
    pod_names = [o["metadata"]["name"] for o in descendants if o["kind"] == "Pod"]

    started = time.monotonic()
    kube.delete(product.prm_path(namespace, _NAME))  # as `kubectl delete prm` does: background propagation
    owned = {o["metadata"]["uid"] for o in descendants} | {prm["metadata"]["uid"]}

    def leftovers() -> list[dict[str, Any]]:
        now = _everything(kube, namespace, paths)
        return [
            o
            for o in now
            if o["metadata"]["uid"] in owned
            or (o["metadata"].get("labels") or {}).get(product.MODEL_LABEL) == _NAME
            or any(r["uid"] in owned for r in o["metadata"].get("ownerReferences") or [])
        ]

    product.wait_until(lambda: not leftovers(), 180, 0.5, what="every child of the deleted resource gone")
    gone = time.monotonic() - started
    # The pods' processes stopped too (the runner, like a kubelet, ends them before the pod goes).
    for url in engine_urls + [f"http://{ip}:{product.ROUTER_PORT}" for ip in router_ips]:
        assert not product.answers(url + "/health", timeout=1), url
    # ... on SIGTERM, each in time: none had to be killed at the end of its grace period.
    runner_log = (cluster.logs / "podrunner.log").read_text()
    exits = re.findall(rf"pod {re.escape(namespace)}/({_NAME}-\S+): (\w+) exited with (\d+)", runner_log)
    assert sorted(pod for pod, _, _ in exits) == sorted(pod_names), exits
    assert {code for _, _, code in exits} == {"0"}, exits
    say(f"deleted the resource: {len(descendants)} children ({', '.join(sorted(kinds))}) gone after {gone:.1f}s")
    # What is left in the namespace is what Kubernetes puts in every namespace.
    rest = _everything(kube, namespace, paths)
    assert _describe([o for o in rest if o["kind"] != "Event"]) == [
        "ConfigMap/kube-root-ca.crt",
        "ServiceAccount/default",
    ], _describe(rest)


def _descendants(objects: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """Every object owned by ``root``, directly or through other owned objects."""
    owned: dict[str, dict[str, Any]] = {}
    frontier = {root}
    while frontier:
        found = {
            o["metadata"]["uid"]: o
            for o in objects
            if o["metadata"]["uid"] not in owned
            and any(r["uid"] in frontier for r in o["metadata"].get("ownerReferences") or [])
        }
        owned.update(found)
        frontier = set(found)
    return list(owned.values())
