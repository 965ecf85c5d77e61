"""Prometheus discovers annotated pods and scrapes the real process behind them."""

from __future__ import annotations

import textwrap

from e2e.conftest import Cluster, wait_for
from e2e.kube import Kube


def test_prometheus_scrapes_an_annotated_pod(cluster: Cluster, kube: Kube, namespace: str) -> None:
    code = textwrap.dedent("""
        import os, time
        from prometheus_client import Gauge, start_http_server
        Gauge("e2e_smoke_value", "a value the e2e test looks for").set(42)
        start_http_server(9100, addr=os.environ["POD_IP"])
        time.sleep(3600)
    """)
    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "exporter",
                "labels": {"app": "exporter"},
                "annotations": {
                    "prometheus.io/scrape": "true",
                    "prometheus.io/port": "9100",
                    "prometheus.io/path": "/metrics",
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "prefixroute/prefixroute:e2e",
                        "command": ["python3", "-c", code],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    }
                ]
            },
        },
    )
    result = wait_for(
        lambda: cluster.prometheus_query(f'e2e_smoke_value{{namespace="{namespace}"}}'),
        45,
        interval=1.0,
        what="the pod's metric in Prometheus",
    )
    assert result[0]["metric"]["pod"] == "exporter"
    assert result[0]["metric"]["app"] == "exporter"
    assert float(result[0]["value"][1]) == 42.0
    up = cluster.prometheus_query(f'up{{namespace="{namespace}",pod="exporter"}}')
    assert up
    assert up[0]["value"][1] == "1"
