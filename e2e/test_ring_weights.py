"""Ring weights on the local real control plane: slow start and a drained replica that stays.

- Slow start without autoscaling: a model of two engine-sim replicas is scaled to three
  (``kubectl scale prm``); the new engine joins status.ring at a tenth of a weight beside
  the two warm ones and ramps to 1 over ``engine.slowStartSeconds``, one published step at
  a time (the operator's models loop republishes the ring as time passes).
- A drained replica that survives its scale-down: with autoscaling, one of three engines is
  frozen (SIGSTOP) so its readiness probe fails; the calm fleet drains the coldest of the
  other two and scales 3→2, and the ReplicaSet — which deletes a pod that is not ready before
  it reads any pod-deletion-cost — removes the frozen one. The drained engine stays: its
  weight comes back to 1, its deletion cost goes, and a ``Restored`` Event says so.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from typing import Any

from e2e import product
from e2e.kube import Kube
from e2e.test_faults import container_pid

SLOW_START = 12


def _ready_for(pod: dict[str, Any]) -> float:
    """Seconds since the pod turned Ready (by its condition's time, as the operator reads it)."""
    (ready,) = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    since = datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
    return (datetime.now(UTC) - since).total_seconds()


def _weights(kube: Kube, namespace: str, name: str) -> dict[str, float]:
    return {m["pod"]: m["weight"] for m in product.ring_members(product.get_model(kube, namespace, name))}


def test_a_new_engine_slow_starts_in_the_ring_without_autoscaling(
    cluster: Any, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    doc = product.sim_model("ramp", replicas=2)
    doc["spec"]["engine"]["slowStartSeconds"] = SLOW_START
    product.create_model(kube, namespace, doc)
    product.wait_serving(kube, namespace, "ramp", 2)
    first = _weights(kube, namespace, "ramp")
    assert set(first.values()) == {1}  # a fleet new as a whole is not ramped
    # the two become warm: ready for longer than the slow start
    product.wait_until(
        lambda: all(_ready_for(p) > SLOW_START for p in product.live(product.pods(kube, namespace, "ramp", "engine"))),
        60,
        0.5,
        what="the first two engines warm",
    )

    cluster.kubectl("scale", "prm", "ramp", "--replicas=3", "-n", namespace)
    seen: list[float] = []

    def new_member_weight() -> float | None:
        weights = _weights(kube, namespace, "ramp")
        new = [w for pod, w in weights.items() if pod not in first]
        if new:
            seen.append(new[0])
            assert all(weights[p] == 1 for p in first), weights  # the warm ones keep theirs
        return new[0] if new and new[0] == 1 else None

    product.wait_until(new_member_weight, 90, 0.25, what="the new engine at full weight")
    steps = sorted(set(seen))
    assert steps[0] <= 0.3, seen  # it joined low ...
    assert len(steps) >= 3, seen
    assert steps[-1] == 1, seen  # ... and ramped in published steps
    assert seen == sorted(seen), seen  # never backwards


def test_a_drained_engine_that_survives_its_scale_down_gets_its_weight_back(
    cluster: Any, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    doc = product.sim_model("stay", replicas=3)
    engine = doc["spec"]["engine"]
    engine["slowStartSeconds"] = 0
    engine["terminationGracePeriodSeconds"] = 3  # the frozen one goes quickly
    engine["probes"] = {"liveness": {"periodSeconds": 60, "failureThreshold": 10}}  # frozen, not restarted
    doc["spec"]["autoscaling"] = {
        "enabled": True,
        "prometheus": cluster.prometheus,
        "minReplicas": 2,
        "maxReplicas": 3,
        "hitRateFloor": 0,
        "intervalSeconds": 1,
        "scaleUpWindowSeconds": 4,
        "scaleDownWindowSeconds": 20,
        "scaleUpCooldownSeconds": 0,
        "scaleDownCooldownSeconds": 0,
        "drainTimeoutSeconds": 10,
    }
    product.create_model(kube, namespace, doc)
    product.wait_serving(kube, namespace, "stay", 3)
    product.wait_until(
        lambda: (
            product.condition(product.get_model(kube, namespace, "stay"), "MetricsAvailable").get("status") == "True"
        ),
        60,
        0.5,
        what="the autoscaler reading signals",
    )
    engines = sorted(product.live(product.pods(kube, namespace, "stay", "engine")), key=lambda p: p["metadata"]["name"])
    frozen = engines[-1]  # the last by name: never the coldest of an idle fleet (ties go by name)
    os.kill(container_pid(frozen), signal.SIGSTOP)
    try:
        restored = product.wait_until(
            lambda: next((e for e in _events(kube, namespace, "stay") if e["reason"] == "Restored"), None),
            120,
            0.5,
            what="a Restored Event",
        )
        survivor = restored["message"].split()[0]
        assert survivor != frozen["metadata"]["name"]
        assert "replicas went down to 2" in restored["message"]
        reasons = [e["reason"] for e in _events(kube, namespace, "stay")]
        assert reasons.index("Draining") < reasons.index("ScaledDown") < reasons.index("Restored"), reasons
        product.wait_until(
            lambda: (
                {p["metadata"]["name"] for p in product.live(product.pods(kube, namespace, "stay", "engine"))}
                == {e["metadata"]["name"] for e in engines[:2]}
            ),
            60,
            0.5,
            what="the frozen engine deleted, the drained one kept",
        )
        assert _weights(kube, namespace, "stay")[survivor] == 1
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{survivor}")
        assert "controller.kubernetes.io/pod-deletion-cost" not in (pod["metadata"].get("annotations") or {})
    finally:
        still = [
            p
            for p in product.pods(kube, namespace, "stay", "engine")
            if p["metadata"]["uid"] == frozen["metadata"]["uid"]
        ]
        if still:  # the same pod, so the same process of ours: let it go on (or be stopped)
            os.kill(container_pid(frozen), signal.SIGCONT)


def _events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return product.model_events(kube, namespace, name)
