"""Install as users do, and the engine-sim example serves.

The operator comes from ``manifests/overlays/all-namespaces`` through ``kubectl kustomize |
kubectl apply --server-side`` (docs/operator.md) and reaches Ready by its real probe; then
``kubectl apply -f manifests/examples/engine-sim-demo.yaml`` gives engine pods and a router
that run as real processes, a ring of the ready engines in status, Ready=True and the
columns of ``kubectl get prm``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube

DEMO = product.EXAMPLES / "engine-sim-demo.yaml"


def test_fresh_install_with_kustomize_reaches_ready(cluster: Cluster, kube: Kube, say: Callable[[str], None]) -> None:
    product.uninstall_operator(cluster.kubectl, kube)  # from a clean state, whatever ran before
    started = time.monotonic()
    pod = product.install_operator(cluster.kubectl, kube)
    say(f"operator installed with kustomize and Ready in {time.monotonic() - started:.1f}s")

    for name in product.CRDS:
        assert product.crd_established(kube, name)
    assert product.pod_ready(pod)
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"]
    assert status["restartCount"] == 0
    assert "running" in status["state"]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == product.OPERATOR
    container = spec["containers"][0]
    assert container["image"].startswith("prefixroute/prefixroute:")
    assert container["args"][-1] == "--all-namespaces"  # the overlay's scope
    # Ready comes from the real readiness probe against the real process: kopf's health
    # endpoint on the pod IP, which answers by the time the pod reads Ready.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz", "scheme": "HTTP"}
    assert product.answers(f"http://{pod['status']['podIP']}:8081/healthz")
    # The process runs under the operator's ServiceAccount token (docs/control-plane.md).
    assert (cluster.pod_log_dir(product.SYSTEM_NAMESPACE, pod) / "operator.log").exists()

    # A second apply of the same manifests changes nothing.
    diff = cluster.kubectl(
        "diff", "--server-side", "-f", "-", input=product.render_overlay(cluster.kubectl), check=False
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr


def _get_prm_table(cluster: Cluster, namespace: str) -> list[dict[str, str]]:
    """``kubectl get prm`` as rows keyed by column header (columns split on 2+ spaces)."""
    out = cluster.kubectl("get", "prm", "-n", namespace).stdout
    lines = out.splitlines()
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=\s\s))\S", lines[0])]
    headers = [lines[0][a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    return [
        {h: line[a:b].strip() if b else line[a:].strip() for h, a, b in zip(headers, starts, [*starts[1:], None])}
        for line in lines[1:]
    ]


def test_engine_sim_example_serves(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    started = time.monotonic()
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO))
    prm = product.wait_serving(kube, namespace, "demo", 3)
    say(f"engine-sim example serving (3 engines in the ring, Ready) {time.monotonic() - started:.1f}s after apply")

    engines = product.pods(kube, namespace, "demo", "engine")
    routers = product.pods(kube, namespace, "demo", "router")
    assert len(engines) == 3
    assert len(routers) == 1
    for pod in engines + routers:
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        assert product.pod_ready(pod), pod["metadata"]["name"]
        assert pod["spec"]["nodeName"].startswith("kwok-cpu-")  # no GPU asked, none taken

    # status.ring: exactly the ready engine pods, at their pod IPs, weight 1.
    members = {m["pod"]: m for m in product.ring_members(prm)}
    assert members == {
        p["metadata"]["name"]: {
            "pod": p["metadata"]["name"],
            "address": f"{p['status']['podIP']}:8000",
            "weight": 1,
            "ready": True,
        }
        for p in engines
    }
    assert prm["status"]["ring"]["version"]
    assert sorted(members) == [m["pod"] for m in product.ring_members(prm)]  # sorted by pod name
    ready = product.condition(prm, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Serving")
    assert product.condition(prm, "Degraded")["status"] == "False"
    assert prm["status"]["readyText"] == "3/3"
    assert prm["status"]["readyReplicas"] == 3
    assert prm["status"]["routerEndpoint"] == f"http://demo-router.{namespace}.svc:80"

    # Every ring member is a real engine-sim process answering on its address.
    for member in members.values():
        assert product.answers(f"http://{member['address']}/health")
    router = product.router_url(kube, namespace, "demo")
    status, _, body = product.http("GET", router + "/v1/models")
    assert status == 200
    assert b'"demo-llm"' in body
    status, member = product.completion(router, "Hello from the e2e suite", model="demo-llm")
    assert status == 200
    assert member in members

    # kubectl get prm: the columns the operator fills, from the CRD's printer columns. Hit
    # rate and TTFT p50 are, with autoscaling off, the routers' own figures of the last
    # minute, which the operator reads from the router pods every 10 s.
    filled = product.wait_until(
        lambda: (s := product.get_model(kube, namespace, "demo")["status"]).get("ttftP50") is not None and s,
        30,
        0.5,
        what="the TTFT p50 column from the router's figures",
    )
    rows = _get_prm_table(cluster, namespace)
    assert [r["NAME"] for r in rows] == ["demo"], rows
    row = rows[0]
    assert list(row) == ["NAME", "READY", "STRATEGY", "FRONT", "HIT RATE", "TTFT P50", "AGE"]
    assert row["READY"] == "3/3", row
    assert row["STRATEGY"] == "prefix-cache", row
    assert re.fullmatch(r"\d+s", row["AGE"]), row
    assert row["FRONT"] == prm["status"].get("front", ""), row  # which front serves: the router here
    for column, key in (("HIT RATE", "hitRate"), ("TTFT P50", "ttftP50")):
        value = filled.get(key)
        assert row[column] == ("" if value is None else str(value)), (column, row)
    say(
        "kubectl get prm:\n      "
        + cluster.kubectl("get", "prm", "-n", namespace).stdout.strip().replace("\n", "\n      ")
    )
