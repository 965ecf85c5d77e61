"""Where one local cluster is: its addresses inside the network namespace, and its files.

Inside the namespace ``$PREFIXROUTE_NETNS`` (default ``prefixroute``) the pod CIDR
10.244.0.0/16 is a local route on lo: every address in it is bindable. 10.244.0.1 is the
"host": the API server (:6443), Prometheus (:9090), the pod runner's kubelet endpoint
(:10250) and the nodes' InternalIP; fake node
*i* hands out pod IPs from 10.244.<i+1>.0/24. Nothing listens outside the namespace.

State (certificates, etcd data, logs, PID records, pod runtime dirs) lives in
``$PREFIXROUTE_CACHE/clusters/<netns>``; see docs/control-plane.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from e2e import build
from prefixroute.cache_folder import cache_dir

POD_CIDR = "10.244.0.0/16"
HOST_IP = "10.244.0.1"
API_PORT = 6443
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
PROMETHEUS_PORT = 9090
KUBELET_PORT = 10250
"""The pod runner's kubelet endpoint (container logs) on the host address, which every fake node
advertises. The kubelet's own port: each cluster has a network namespace of its own, so two
clusters' runners never meet, like their API servers on 6443."""
KWOK_SERVER_ADDRESS = "127.0.0.1:10247"
"""Where KWOK's own server listens (it would take the nodes' port otherwise); nothing asks it."""
KWOK_DEFAULT_CIDR = "10.244.128.0/17"
"""For nodes without spec.podCIDR; ours all have one (10.244.<i+1>.0/24)."""

DEFAULT_IMAGES = ("prefixroute/prefixroute", "prefixroute/vllm-sim")  # the second: e2e/vllmsim.py


@dataclass(frozen=True)
class Cluster:
    """Where one cluster's files are; derived from the netns name and the cache dir."""

    name: str

    @classmethod
    def from_env(cls, name: str | None = None) -> Cluster:
        return cls(name or os.environ.get("PREFIXROUTE_NETNS", "prefixroute"))

    @property
    def state(self) -> Path:
        return cache_dir() / "clusters" / self.name

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{HOST_IP}:{API_PORT}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{HOST_IP}:{PROMETHEUS_PORT}"

    def kubeconfig(self, stem: str) -> Path:
        return self.state / f"{stem}.kubeconfig"

    @property
    def images(self) -> tuple[str, ...]:
        env = os.environ.get("PREFIXROUTE_RUNNER_IMAGES")
        return tuple(i.strip() for i in env.split(",") if i.strip()) if env else DEFAULT_IMAGES

    def info(self) -> dict[str, str]:
        """What other tools need, also written to ``cluster.json`` in the state dir."""
        bins = build.binaries()
        return {
            "netns": self.name,
            "server": self.server,
            "kubeconfig": str(self.admin_kubeconfig),
            "ca": str(self.pki / "ca.crt"),
            "prometheus": self.prometheus_url,
            "host_ip": HOST_IP,
            "pod_cidr": POD_CIDR,
            "state": str(self.state),
            "logs": str(self.logs),
            "kubectl": str(bins["kubectl"]),
            "helm": str(bins["helm"]),
            "images": ",".join(self.images),
        }
