"""What ``up`` puts into a fresh API server before anything else runs: the fake nodes and
the permissions of the daemons that act as users (Prometheus, the pod runner).

Two CPU nodes and four GPU nodes with eight ``nvidia.com/gpu`` each, labelled and tainted
as the NVIDIA GPU operator and cloud GPU node pools do, so the operator's GPU pods are
scheduled as they would be on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from e2e import kwokconfig, runnernodes

RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "prefixroute:prometheus"}
rules:
- apiGroups: [""]
  resources: [pods, services, endpoints, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "prefixroute:prometheus"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "prefixroute:prometheus"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "prefixroute:prometheus"}]
---
# What a kubelet needs for the pods it runs (the runner acts for every fake node).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "prefixroute:podrunner"}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps, secrets, services, nodes]
  verbs: [get, list, watch]
- apiGroups: [""]  # a claim bound to a hostPath volume is that directory (e2e/volumes.py)
  resources: [persistentvolumeclaims, persistentvolumes]
  verbs: [get]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]  # keeping the nodes without KWOK (e2e/runnernodes.py)
  resources: [nodes/status]
  verbs: [patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "prefixroute:podrunner"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "prefixroute:podrunner"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "prefixroute:podrunner"}]
"""
"""ClusterRoles and bindings for the users in ``e2e.pki.CLIENTS`` that are not Kubernetes' own."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: int
    cpu: str
    memory: str


def default_nodes() -> list[NodeSpec]:
    cpu = [NodeSpec(f"kwok-cpu-{i}", 0, "32", "128Gi") for i in range(2)]
    gpu = [NodeSpec(f"kwok-gpu-{i}", 8, "192", "2048Gi") for i in range(4)]
    return cpu + gpu


def node_manifest(i: int, n: NodeSpec, runner_nodes: bool = False) -> dict[str, Any]:
    """Node *i*, handing out pod IPs from 10.244.<i+1>.0/24, kept by KWOK, or by the pod
    runner with ``runner_nodes`` (e2e/runnernodes.py): one annotation, never both."""
    keeper = runnernodes.RUNNER_NODE_ANNOTATION if runner_nodes else kwokconfig.FAKE_NODE_ANNOTATION
    labels = {
        "kubernetes.io/hostname": n.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "topology.kubernetes.io/zone": "local-a",
        "node.kubernetes.io/instance-type": "gpu-8x" if n.gpus else "cpu-32",
    }
    capacity = {"cpu": n.cpu, "memory": n.memory, "pods": "110", "ephemeral-storage": "1Ti"}
    taints: list[dict[str, str]] = []
    if n.gpus:
        # What the NVIDIA GPU operator / cloud GPU node pools put on GPU nodes.
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(n.gpus),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
            }
        )
        capacity["nvidia.com/gpu"] = str(n.gpus)
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": labels,
            "annotations": {keeper[0]: keeper[1], "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"10.244.{i + 1}.0/24", "podCIDRs": [f"10.244.{i + 1}.0/24"], "taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity, "phase": "Running"},
    }
