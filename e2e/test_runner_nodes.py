"""A cluster without KWOK (``cluster up --runner-nodes``, the demo's): the pod runner keeps
the nodes Ready through the node lifecycle controller's grace period, renews their leases,
and runs a pod on the IP it gives it from the node's pod CIDR.

Its own cluster, as the demo brings it up: the session's cluster (conftest) has KWOK.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import daemon_records, layout, netns, pins, runnernodes
from e2e.kube import Kube
from e2e.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="e2e tests need root for network namespaces"),
]


@pytest.fixture(scope="module")
def runner_cluster() -> Iterator[layout.Cluster]:
    c = layout.Cluster.from_env(f"pr-rn-{os.getpid()}")
    cluster = [sys.executable, "-m", "e2e.cluster", "--name", c.name]
    subprocess.run([*cluster, "up", "--restart", "--runner-nodes"], check=True, cwd=pins.REPO_ROOT, stdout=sys.stderr)
    # Back in the session cluster's namespace afterwards (netns.leave would go to the host's,
    # where 10.244.0.1 is not the session's API server), and out of this one before `down`,
    # which ends every process in it.
    with netns.visiting(c.name):
        yield c
    subprocess.run([*cluster, "down"], check=False, cwd=pins.REPO_ROOT, stdout=sys.stderr)


def _ready(obj: dict[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in obj.get("status", {}).get("conditions", []))


def _renew_times(kube: Kube) -> dict[str, str]:
    leases = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{runnernodes.LEASE_NAMESPACE}/leases")["items"]
    return {x["metadata"]["name"]: x["spec"]["renewTime"] for x in leases}


def test_no_kwok_runs_and_the_runner_keeps_the_nodes(runner_cluster: layout.Cluster) -> None:
    running = {r.name for r in daemon_records.load(runner_cluster.pids)}
    assert "kwok" not in running
    assert "podrunner" in running
    kube = Kube(str(runner_cluster.admin_kubeconfig))
    nodes = kube.get("/api/v1/nodes")["items"]
    assert len(nodes) == 6
    assert all(runnernodes.is_runner_node(n) for n in nodes)
    assert all(_ready(n) for n in nodes)
    first = _renew_times(kube)
    assert set(first) == {n["metadata"]["name"] for n in nodes}


def test_a_pod_runs_on_its_nodes_ip_and_the_nodes_stay_ready_past_the_grace_period(
    runner_cluster: layout.Cluster,
) -> None:
    kube = Kube(str(runner_cluster.admin_kubeconfig))
    started = time.monotonic()
    first = _renew_times(kube)
    serve = (
        "import http.server, os\n"
        "http.server.HTTPServer((os.environ['POD_IP'], 8080), http.server.SimpleHTTPRequestHandler).serve_forever()"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "served"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "kwok-cpu-1"},
            "containers": [
                {
                    "name": "main",
                    "image": "prefixroute/prefixroute:e2e",
                    "command": ["python3", "-c", serve],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }
    kube.post("/api/v1/namespaces/default/pods", pod)

    def served_ready() -> dict[str, Any] | None:
        got = kube.get("/api/v1/namespaces/default/pods/served")
        return got if _ready(got) else None

    ready = wait_for(served_ready, 60, what="pod default/served Ready")
    ip = ready["status"]["podIP"]
    node = kube.get("/api/v1/nodes/kwok-cpu-1")
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(node["spec"]["podCIDR"])
    assert ready["status"]["phase"] == "Running"
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=5) as resp:
        assert resp.status == 200

    # The node lifecycle controller's grace period is 50 s: past it, only renewed leases keep
    # the nodes Ready and untainted.
    time.sleep(max(0.0, 70 - (time.monotonic() - started)))
    nodes = kube.get("/api/v1/nodes")["items"]
    assert all(_ready(n) for n in nodes), [n["status"]["conditions"] for n in nodes if not _ready(n)]
    taints = {t["key"] for n in nodes for t in n["spec"].get("taints") or []}
    assert not any(t.startswith("node.kubernetes.io/") for t in taints), taints
    later = _renew_times(kube)
    assert all(later[name] > first[name] for name in first), (first, later)

    kube.delete("/api/v1/namespaces/default/pods/served")
    wait_for(
        lambda: (
            not any(p["metadata"]["name"] == "served" for p in kube.get("/api/v1/namespaces/default/pods")["items"])
        ),
        60,
        what="pod default/served gone",
    )
