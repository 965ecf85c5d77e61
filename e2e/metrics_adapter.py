"""prometheus-adapter as the cluster's custom metrics API (custom.metrics.k8s.io), for a test.

The binary is built from its Go module (``e2e.build``, component ``prometheus-adapter``) and
runs as a local process in the cluster's network namespace, on an address of its own in
the pod network (10.244.0.0/16 is a local route), with its rules from
``manifests/examples/hpa.yaml`` (the ConfigMap users mount). It reads the cluster's
Prometheus and the API server (as the admin client: it lists pods and namespaces, checks
callers with TokenReview/SubjectAccessReview, and reads the front-proxy CA from the
``extension-apiserver-authentication`` ConfigMap). The API server reaches it through an
APIService whose selector-less Service has an EndpointSlice naming that address (the API
server routes to endpoints: ``--enable-aggregator-routing``), and proxies every request as
front-proxy-client (``--requestheader-*`` flags, e2e/daemons.py).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import yaml

from e2e import build, product
from e2e.conftest import Cluster
from e2e.kube import ApiError, Kube
from e2e.waiting import wait_for
from prefixroute.processes import Child

NAMESPACE = "prefixroute-metrics-adapter"
SERVICE = "prometheus-adapter"
API_SERVICE = "v1beta1.custom.metrics.k8s.io"
PORT = 6443
EXAMPLE = product.EXAMPLES / "hpa.yaml"


def rules() -> str:
    """The adapter's configuration, as the example ships it."""
    (config,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "ConfigMap"]
    return str(config["data"]["config.yaml"])


def _resources(host: str) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for what the API server needs to find the adapter."""
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        (
            f"{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": PORT, "protocol": "TCP"}]},
            },
        ),
        (
            f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": SERVICE, "labels": {"kubernetes.io/service-name": SERVICE}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": PORT, "protocol": "TCP"}],
            },
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": API_SERVICE},
                "spec": {
                    "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443},
                    "group": "custom.metrics.k8s.io",
                    "version": "v1beta1",
                    # the adapter's certificate is its own self-signed one (--cert-dir)
                    "insecureSkipTLSVerify": True,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ),
    ]


def _available(kube: Kube) -> bool:
    found = kube.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}")
    return any(
        c["type"] == "Available" and c["status"] == "True" for c in found.get("status", {}).get("conditions", [])
    )


class MetricsAdapter:
    def __init__(self, cluster: Cluster, kube: Kube) -> None:
        self.cluster, self.kube = cluster, kube
        self.host = f"10.244.251.{random.randint(2, 250)}"
        self._scratch = tempfile.TemporaryDirectory(prefix="prometheus-adapter-")
        work = Path(self._scratch.name)
        (work / "config.yaml").write_text(rules())
        binary = build.ensure(["prometheus-adapter"], quiet=True)["prometheus-adapter"]
        admin = str(cluster.kubeconfig)
        self.child = Child(
            "prometheus-adapter",
            [
                str(binary),
                f"--bind-address={self.host}",
                f"--secure-port={PORT}",
                f"--cert-dir={work / 'certs'}",
                f"--lister-kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                f"--prometheus-url={cluster.prometheus}",
                "--metrics-relist-interval=5s",
                f"--config={work / 'config.yaml'}",
                "--v=2",
            ],
            log=cluster.logs / "prometheus-adapter.log",
        )

    def start(self) -> MetricsAdapter:
        self.child.start()
        for path, obj in _resources(self.host):
            try:
                self.kube.post(path, obj)
            except ApiError as e:
                if e.status != 409:
                    raise
        wait_for(lambda: _available(self.kube), 90, 0.5, what=f"the APIService {API_SERVICE} Available")
        return self

    def stop(self) -> None:
        for path in (
            f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}",
            f"/api/v1/namespaces/{NAMESPACE}",
        ):
            try:
                self.kube.delete(path)
            except ApiError as e:
                if e.status != 404:
                    raise
        self.child.stop()
        self._scratch.cleanup()
