"""The Hit rate and TTFT p50 columns without the autoscaler, on the local real control plane.

A model without autoscaling (so with no Prometheus involved) serves a few repeated prompts;
its router keeps the last minute's figures — its time to first byte, and the engines' own
prefix cache counters as it scrapes them (``--scrape-interval``) — and the operator reads
them from the router pods and fills status.hitRate and status.ttftP50, the columns of
``kubectl get prm``.
"""

from __future__ import annotations

import re
from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube

NAME = "columns"


def test_the_columns_come_from_the_routers_figures_when_autoscaling_is_off(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    doc = product.sim_model(NAME, replicas=2)
    doc["spec"]["router"]["args"] = ["--scrape-interval", "1"]  # the engines' counters, read every second
    product.create_model(kube, namespace, doc)
    product.wait_serving(kube, namespace, NAME, 2)
    prm = product.get_model(kube, namespace, NAME)
    assert prm["spec"]["autoscaling"]["enabled"] is False
    assert "hitRate" not in prm["status"]
    router = product.router_url(kube, namespace, NAME)
    shared = "a system prompt every request of this test starts with " * 40
    for i in range(24):
        status, _ = product.completion(router, f"{shared} question {i % 4}")
        assert status == 200

    filled = product.wait_until(
        lambda: (
            (s := product.get_model(kube, namespace, NAME)["status"]).get("hitRate") is not None
            and s.get("ttftP50") is not None
            and s
        ),
        60,
        1,
        what="status.hitRate and status.ttftP50 from the router's figures",
    )
    assert 0.5 < filled["hitRate"] <= 1  # the shared prompt is cached after its first request
    assert filled["ttftP50"] > 0
    table = cluster.kubectl("get", "prm", NAME, "-n", namespace).stdout.splitlines()
    header, row = table[0], table[1]
    hit = row[header.index("HIT RATE") :].split()[0]
    ttft = row[header.index("TTFT P50") :].split()[0]
    assert re.fullmatch(r"0\.\d+|1", hit), table
    assert re.fullmatch(r"\d+(\.\d+)?(e-\d+)?", ttft), table
