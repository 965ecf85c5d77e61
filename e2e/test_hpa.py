"""A HorizontalPodAutoscaler scales a PrefixRoutedModel, on the local real control plane.

With the built-in autoscaler off, kube-controller-manager's HPA controller drives the
resource's scale subresource (spec.replicas, status.replicas, status.selector) from a real
metrics pipeline: engine-sim's ``vllm:num_requests_waiting`` scraped by Prometheus, served
as the custom metric ``vllm_requests_waiting`` per pod by prometheus-adapter (built from its
Go module, ``e2e/metrics_adapter.py``) through the aggregation layer. The example
``manifests/examples/hpa.yaml`` — model, HPA and the adapter's rules — is what is applied.
Under load the queue per engine rises above the target and the HPA scales the model up;
the load gone, it scales back to one (the scale-down stabilisation shortened for the test).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube
from e2e.metrics_adapter import EXAMPLE, MetricsAdapter

NAME = "hpa-demo"
HPA = "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/" + NAME


@pytest.fixture
def adapter(cluster: Cluster, kube: Kube) -> Iterator[MetricsAdapter]:
    running = MetricsAdapter(cluster, kube).start()
    yield running
    running.stop()


class Load:
    """Clients in a closed loop through the router, ten tokens each: a queue on every engine."""

    def __init__(self, router: str, clients: int = 10) -> None:
        self.router, self.ok, self.failed = router, 0, 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def _run(self, worker: int) -> None:
        i = 0
        while not self._stop.is_set():
            body = json.dumps(
                {"model": "hpa-llm", "prompt": f"client {worker} asks {i}", "max_tokens": 10, "min_tokens": 10}
            ).encode()
            i += 1
            request = urllib.request.Request(
                self.router + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as resp:
                    resp.read()
                    self.ok += 1
            except OSError:
                self.failed += 1

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def _condition(hpa: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in hpa.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def test_an_hpa_scales_the_model_through_its_scale_subresource_from_custom_metrics(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], adapter: MetricsAdapter
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE))
    product.wait_serving(kube, namespace, NAME, 1)
    # the custom metric is served for the model's engine pods
    metric = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/vllm_requests_waiting"
    served = product.wait_until(lambda: kube.get(metric)["items"], 60, 1, what="the custom metric for the engines")
    assert {i["describedObject"]["name"] for i in served} == {
        p["metadata"]["name"] for p in product.live(product.pods(kube, namespace, NAME, "engine"))
    }
    hpa = HPA.format(ns=namespace)
    product.wait_until(
        lambda: _condition(kube.get(hpa), "ScalingActive").get("status") == "True",
        60,
        1,
        what="the HPA reading its metric (ScalingActive)",
    )
    # shorter scale-down stabilisation than the example's five minutes, for the test
    kube.patch(hpa, {"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 5}}}}, kind="merge")

    with Load(product.router_url(kube, namespace, NAME)) as load:
        grown = product.wait_until(
            lambda: (m := product.get_model(kube, namespace, NAME))["spec"]["replicas"] > 1 and m,
            120,
            1,
            what="the HPA raising spec.replicas through the scale subresource",
        )
        replicas = grown["spec"]["replicas"]
        product.wait_serving(kube, namespace, NAME, replicas, timeout=120)
        status = kube.get(hpa)["status"]
        assert status["desiredReplicas"] >= replicas > 1
        (current,) = status["currentMetrics"]
        assert current["pods"]["metric"]["name"] == "vllm_requests_waiting"
    assert load.ok > 0
    scale = kube.get(product.prm_path(namespace, NAME) + "/scale")
    assert scale["status"]["selector"] == grown["status"]["selector"]
    fields = {e["manager"] for e in kube.get(product.prm_path(namespace, NAME))["metadata"]["managedFields"]}
    assert "kube-controller-manager" in fields  # the HPA controller wrote spec.replicas

    product.wait_until(
        lambda: product.get_model(kube, namespace, NAME)["spec"]["replicas"] == 1,
        180,
        1,
        what="the HPA scaling back to one once the load is gone",
    )
    product.wait_serving(kube, namespace, NAME, 1, timeout=120)
