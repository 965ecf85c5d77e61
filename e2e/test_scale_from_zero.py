"""Scale to zero and back on the local real control plane (the operator installed with the
kustomize overlay, real Prometheus scraping engine-sim and the router).

A model with ``autoscaling.minReplicas: 0``: idle for ``scaleToZeroIdleSeconds`` it goes to
zero engines (``ScaledToZero``; Ready=False ``ScaledToZero``); its router stays and holds
the requests that then arrive (60 s by default for such a model) instead of answering 503;
the autoscaler reads the held requests from Prometheus and scales to one engine
(``ScaledFromZero``), and every held request is served by it. Idle again, back to zero.
The bounds of holding (time, count, 503 with Retry-After) are tested on the router itself
(tests/router/test_app.py).
"""

from __future__ import annotations

import threading
from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube

NAME = "sleepy"


def _model(prometheus: str) -> dict[str, Any]:
    doc = product.sim_model(NAME, replicas=1)
    doc["spec"]["autoscaling"] = {
        "enabled": True,
        "prometheus": prometheus,
        "minReplicas": 0,
        "maxReplicas": 2,
        "intervalSeconds": 1,
        "scaleUpWindowSeconds": 4,
        "scaleDownWindowSeconds": 8,
        "scaleToZeroIdleSeconds": 8,
    }
    return doc


def _events(kube: Kube, namespace: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in product.model_events(kube, namespace, NAME)]


def _at_zero(kube: Kube, namespace: str) -> bool:
    prm = product.get_model(kube, namespace, NAME)
    ready = product.condition(prm, "Ready")
    engines = product.live(product.pods(kube, namespace, NAME, "engine"))
    return not engines and (ready.get("status"), ready.get("reason")) == ("False", "ScaledToZero")


def test_idle_to_zero_then_held_requests_wake_an_engine_and_are_served(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    product.create_model(kube, namespace, _model(cluster.prometheus))
    product.wait_serving(kube, namespace, NAME, 1)
    (router_pod,) = product.live(product.pods(kube, namespace, NAME, "router"))
    args = router_pod["spec"]["containers"][0]["args"]
    assert args[args.index("--hold-seconds") + 1] == "60"  # a model that may rest at zero holds requests

    product.wait_until(lambda: _at_zero(kube, namespace), 90, 0.5, what="zero engines after the idle window")
    assert any(r == "ScaledToZero" for r, _ in _events(kube, namespace)), _events(kube, namespace)
    router = product.router_url(kube, namespace, NAME)  # the router stays, and stays Ready

    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        result = product.completion(router, f"a request that arrives at zero engines, number {i}", timeout=90)
        with lock:
            answers.append(result)

    clients = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(3)]
    for client in clients:
        client.start()
    product.wait_until(
        lambda: any(r == "ScaledFromZero" for r, _ in _events(kube, namespace)),
        60,
        0.5,
        what="a ScaledFromZero Event",
    )
    for client in clients:
        client.join(90)
    woke = next(m for r, m in _events(kube, namespace) if r == "ScaledFromZero")
    assert "held by the routers" in woke, woke
    (engine,) = product.live(product.pods(kube, namespace, NAME, "engine"))
    assert sorted(answers) == [(200, engine["metadata"]["name"])] * 3, answers  # every held request served
    status, _, body = product.http("GET", router + "/metrics")
    served = next(
        float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line.startswith('prefixroute_router_holds_total{outcome="served"}')
    )
    assert status == 200
    assert served >= 3

    # idle again: back to zero
    product.wait_until(lambda: _at_zero(kube, namespace), 90, 0.5, what="zero engines again")
    assert [r for r, _ in _events(kube, namespace)].count("ScaledToZero") >= 2, _events(kube, namespace)
