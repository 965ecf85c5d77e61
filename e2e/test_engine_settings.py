"""Engine settings of the CRD on the local real control plane (the operator installed with
the kustomize overlay, the real scheduler and Deployment controller, KWOK's GPU nodes).

- A full GPU pool: four 8-GPU engines fill the four GPU nodes. A spec change with the
  default rollout (surge one) stalls — the surge pod cannot be scheduled — and with
  ``rollout: {maxSurge: 0, maxUnavailable: 1}`` it completes, one engine at a time.
- ``terminationGracePeriodSeconds`` and ``securityContext`` reach the engine pods (the
  process really runs as the user given), ``podSecurityContext`` too.
- ``networkPolicy.enabled`` makes two NetworkPolicies the API server accepts, owned by the
  resource; turning it off deletes them. (This cluster has no network plugin, so nothing
  enforces them here: what they admit is checked by tests/controller/builders/test_network.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e import product
from e2e.kube import Kube
from e2e.test_faults import container_pid
from e2e.waiting import absent

GPU_NODES, GPUS_PER_NODE = 4, 8
SPEC_HASH = "prefixroute.io/spec-hash"


def gpu_model(name: str, rollout: dict[str, Any] | None = None) -> dict[str, Any]:
    """A custom engine (an image the pod runner leaves to KWOK) taking a whole GPU node."""
    engine: dict[str, Any] = {
        "kind": "custom",
        "image": "registry.example/gpu-engine:1",
        "command": ["serve"],
        "args": ["--generation", "1"],
        "resources": {"limits": {"nvidia.com/gpu": GPUS_PER_NODE}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if rollout is not None:
        engine["rollout"] = rollout
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {"replicas": GPU_NODES, "engine": engine, "router": {"replicas": 1}},
    }


def _engines(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return product.live(product.pods(kube, namespace, name, "engine"))


def _rolled_out(kube: Kube, namespace: str, name: str) -> bool:
    """Every engine runs the Deployment's current template, Ready, and there are exactly four."""
    deployment = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-engine")
    wanted = deployment["spec"]["template"]["metadata"]["annotations"][SPEC_HASH]
    pods = _engines(kube, namespace, name)
    return len(pods) == GPU_NODES and all(
        p["metadata"]["annotations"].get(SPEC_HASH) == wanted and product.pod_ready(p) for p in pods
    )


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _set_generation(kube: Kube, namespace: str, name: str, generation: int, rollout: dict[str, Any]) -> None:
    patch = {"spec": {"engine": {"args": ["--generation", str(generation)], "rollout": rollout}}}
    kube.patch(product.prm_path(namespace, name), patch, kind="merge")


def test_a_rollout_on_a_full_gpu_pool_stalls_with_a_surge_and_completes_without_one(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    product.create_model(kube, namespace, gpu_model("gpus"))
    product.wait_until(lambda: _rolled_out(kube, namespace, "gpus"), 120, 0.5, what="four 8-GPU engines Ready")
    nodes = {p["spec"]["nodeName"] for p in _engines(kube, namespace, "gpus")}
    assert len(nodes) == GPU_NODES  # the pool is full: one engine per GPU node

    # the default rollout: one surge pod, which no node can take
    _set_generation(kube, namespace, "gpus", 2, {"maxSurge": 1, "maxUnavailable": 0})
    stuck = product.wait_until(
        lambda: next((p for p in _engines(kube, namespace, "gpus") if _unschedulable(p)), None),
        60,
        0.5,
        what="the surge pod Unschedulable",
    )
    assert "nvidia.com/gpu" in next(c for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled")["message"]
    old = [p for p in _engines(kube, namespace, "gpus") if p["metadata"]["name"] != stuck["metadata"]["name"]]
    assert len(old) == GPU_NODES
    assert all(product.pod_ready(p) for p in old)  # nothing moves
    progressing = product.condition(product.get_model(kube, namespace, "gpus"), "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "RollingOut")

    # in place, one at a time: the rollout completes on the same full pool
    _set_generation(kube, namespace, "gpus", 3, {"maxSurge": 0, "maxUnavailable": 1})
    product.wait_until(
        lambda: (
            kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/gpus-engine")["spec"]["strategy"][
                "rollingUpdate"
            ]
            == {"maxSurge": 0, "maxUnavailable": 1}
        ),
        60,
        0.5,
        what="the engine Deployment's rollout from the spec",
    )
    product.wait_until(lambda: _rolled_out(kube, namespace, "gpus"), 180, 0.5, what="the rollout done")
    assert all(p["spec"]["containers"][0]["args"][-1] == "3" for p in _engines(kube, namespace, "gpus"))


def test_engines_no_node_can_take_are_named_in_the_ready_condition(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    """Twice a GPU node's GPUs per engine: the scheduler places none, and Ready says so in the
    scheduler's words (instead of "waiting for their readiness probes")."""
    doc = gpu_model("toobig")
    doc["spec"]["replicas"] = 2
    doc["spec"]["engine"]["resources"] = {"limits": {"nvidia.com/gpu": 2 * GPUS_PER_NODE}}
    product.create_model(kube, namespace, doc)
    try:
        ready = product.wait_until(
            lambda: (
                (c := product.condition(product.get_model(kube, namespace, "toobig"), "Ready")).get("reason")
                == "EnginesNotScheduled"
                and c
            ),
            60,
            0.5,
            what="Ready naming the unscheduled engines",
        )
        assert ready["status"] == "False"
        assert "engine pod(s) not scheduled: 0/" in ready["message"], ready
        assert "Insufficient nvidia.com/gpu" in ready["message"], ready
    finally:
        kube.delete(product.prm_path(namespace, "toobig"))


def test_grace_period_and_security_contexts_reach_the_engine_process(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    doc = product.sim_model("secure", replicas=1)
    doc["spec"]["engine"].update(
        {
            "terminationGracePeriodSeconds": 900,
            "securityContext": {"runAsUser": 65533, "runAsGroup": 65533},
            "podSecurityContext": {"fsGroup": 65533},
        }
    )
    product.create_model(kube, namespace, doc)
    product.wait_serving(kube, namespace, "secure", 1)
    (pod,) = _engines(kube, namespace, "secure")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 900
    assert pod["spec"]["securityContext"] == {"fsGroup": 65533}
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 65533
    assert sc["readOnlyRootFilesystem"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    status = Path(f"/proc/{container_pid(pod)}/status").read_text()
    uid = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid.split()[1:3] == ["65533", "65533"], uid


def test_network_policies_are_made_when_asked_and_removed_when_not(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    doc = product.sim_model("fenced", replicas=1)
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    doc["spec"]["networkPolicy"] = {"enabled": True, "prometheus": [prometheus]}
    created = product.create_model(kube, namespace, doc)
    base = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    engine = product.wait_until(lambda: kube.get(f"{base}/fenced-engine"), 60, 0.5, what="the engine policy")
    router = kube.get(f"{base}/fenced-router")
    assert engine["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    # engine-sim models route precisely by default: a second rule opens the KV event ports to the routers alone
    rule, events = engine["spec"]["ingress"]
    assert rule["from"][1] == prometheus
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert events["from"] == [rule["from"][0]]
    assert {p["port"] for p in events["ports"]} == {5557, 5558}
    anyone, peers = router["spec"]["ingress"]
    assert anyone == {"ports": [{"port": 8080, "protocol": "TCP"}]}  # no clients listed: anyone
    assert peers == {"ports": [{"port": 9200, "protocol": "TCP"}], "from": [rule["from"][0]]}  # router pods alone
    product.wait_serving(kube, namespace, "fenced", 1)
    kube.patch(product.prm_path(namespace, "fenced"), {"spec": {"networkPolicy": {"enabled": False}}}, kind="merge")
    product.wait_until(
        lambda: absent(kube, f"{base}/fenced-engine") and absent(kube, f"{base}/fenced-router"),
        120,  # foreground deletion: the garbage collector finishes it
        0.5,
        what="both policies deleted",
    )
