"""The control plane's daemons: their start order and command lines.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (not in a cluster
whose pod runner keeps the nodes, ``--runner-nodes``) are the built binaries
(``e2e.build``); the pod runner is ours (``python -m e2e.podrunner``); Prometheus is Debian's. Each command line reads its certificates and kubeconfigs from the cluster's
state folder (``e2e.credentials``) and listens where ``e2e.layout`` says.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from e2e.layout import API_PORT, HOST_IP, KUBELET_PORT, POD_CIDR, PROMETHEUS_PORT, SERVICE_CIDR, Cluster

ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "podrunner", "prometheus")
"""Start order; ``down`` stops in reverse."""


def names(runner_nodes: bool) -> tuple[str, ...]:
    """The daemons of a cluster: without KWOK when the pod runner keeps the nodes."""
    return tuple(n for n in ORDER if not (runner_nodes and n == "kwok"))


def argv(c: Cluster, bins: dict[str, Path], runner_nodes: bool = False) -> dict[str, list[str]]:
    """Every daemon's command line, by name."""
    lines = {
        "etcd": etcd(c, bins),
        "kube-apiserver": kube_apiserver(c, bins),
        "kube-controller-manager": kube_controller_manager(c, bins),
        "kube-scheduler": kube_scheduler(c, bins),
        "podrunner": podrunner(c) + (["--keep-nodes"] if runner_nodes else []),
        "prometheus": prometheus(c),
    }
    if not runner_nodes:
        lines["kwok"] = kwok(c, bins)
    return lines


def etcd(c: Cluster, bins: dict[str, Path]) -> list[str]:
    """One member on 127.0.0.1, no fsync: a throwaway test cluster."""
    return [
        str(bins["etcd"]),
        "--name=default",
        f"--data-dir={c.state / 'etcd'}",
        "--listen-client-urls=http://127.0.0.1:2379",
        "--advertise-client-urls=http://127.0.0.1:2379",
        "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=default=http://127.0.0.1:2380",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",  # a throwaway test cluster: durability buys nothing, fsync costs seconds
        "--log-level=warn",
        "--quota-backend-bytes=2147483648",
    ]


def kube_apiserver(c: Cluster, bins: dict[str, Path]) -> list[str]:
    """Serving TLS on the host address, RBAC and Node authorization, service-account tokens."""
    p = c.pki
    return [
        str(bins["kube-apiserver"]),
        "--etcd-servers=http://127.0.0.1:2379",
        f"--advertise-address={HOST_IP}",
        f"--bind-address={HOST_IP}",
        f"--secure-port={API_PORT}",
        f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--anonymous-auth=true",  # as kubeadm: /healthz, /readyz, /version for anyone
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
        # Pod logs: the nodes' InternalIP is the pod runner's endpoint; their Hostname (the node's
        # name, the default's first choice) resolves nowhere. Its certificate is checked.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-certificate-authority={p / 'ca.crt'}",
        "--allow-privileged=true",
        "--profiling=false",
        "--event-ttl=1h",
        # The aggregation layer, for extension API servers (prometheus-adapter in
        # e2e/test_hpa.py): the API server proxies to them as front-proxy-client, and they
        # trust the user it names in these headers only from that certificate. Routing to the
        # endpoint's address, not the Service's ClusterIP (served by the pod runner's proxy).
        f"--requestheader-client-ca-file={p / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
        "--v=1",
    ]


def kube_controller_manager(c: Cluster, bins: dict[str, Path]) -> list[str]:
    """Every controller, with per-controller service-account credentials."""
    p = c.pki
    kubeconfig = c.kubeconfig("kube-controller-manager")
    return [
        str(bins["kube-controller-manager"]),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--controllers=*",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={p / 'sa.key'}",
        f"--root-ca-file={p / 'ca.crt'}",
        f"--cluster-signing-cert-file={p / 'ca.crt'}",
        f"--cluster-signing-key-file={p / 'ca.key'}",
        f"--cluster-cidr={POD_CIDR}",
        "--allocate-node-cidrs=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--cluster-name=prefixroute",
        # HorizontalPodAutoscalers evaluate every 5 s instead of 15 s: e2e/test_hpa.py waits less
        "--horizontal-pod-autoscaler-sync-period=5s",
        "--v=1",
    ]


def kube_scheduler(c: Cluster, bins: dict[str, Path]) -> list[str]:
    """The stock scheduler."""
    kubeconfig = c.kubeconfig("kube-scheduler")
    return [
        str(bins["kube-scheduler"]),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--v=1",
    ]


def kwok(c: Cluster, bins: dict[str, Path]) -> list[str]:
    """Fake nodes and pods that become Running with IPs (pod CIDRs from each node)."""
    kubeconfig = c.kubeconfig("admin")
    return [
        str(bins["kwok"]),
        f"--kubeconfig={kubeconfig}",
        f"--config={c.state / 'kwok.yaml'}",
    ]


def podrunner(c: Cluster) -> list[str]:
    """Our runner: the project's own images' pods as real processes on their pod IPs."""
    p = c.pki
    kubeconfig = c.kubeconfig("podrunner")
    return [
        sys.executable,
        "-m",
        "e2e.podrunner",
        f"--kubeconfig={kubeconfig}",
        f"--state-dir={c.state / 'pods'}",
        f"--server={c.server}",
        f"--ca={p / 'ca.crt'}",
        f"--host-ip={HOST_IP}",
        f"--targets-file={c.state / 'targets.json'}",
        f"--log-dir={c.logs / 'pods'}",
        f"--kubelet-port={KUBELET_PORT}",
        f"--kubelet-cert={p / 'kubelet.crt'}",
        f"--kubelet-key={p / 'kubelet.key'}",
        "--service-proxy",
        *[f"--image={i}" for i in c.images],
    ]


def prometheus(c: Cluster) -> list[str]:
    """Scrapes what the pod runner lists in targets.json (see ``e2e.promconfig``)."""
    return [
        shutil.which("prometheus") or "/usr/bin/prometheus",
        f"--config.file={c.state / 'prometheus.yml'}",
        f"--storage.tsdb.path={c.state / 'prometheus'}",
        f"--web.listen-address={HOST_IP}:{PROMETHEUS_PORT}",
        "--web.enable-lifecycle",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]
