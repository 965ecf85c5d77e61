"""The fake nodes' kubelet duties, done by the pod runner in a cluster without KWOK.

``python -m e2e.cluster up --runner-nodes`` (what the demo runs) starts no KWOK: the pod
runner (``--keep-nodes``) keeps the nodes carrying ``RUNNER_NODE_ANNOTATION`` alive as a
kubelet would and gives the pods it runs their IPs, which is all the demo asked of KWOK:

* each node's status says Ready (with the kubelet's other conditions, its InternalIP and
  the runner's kubelet endpoint), posted when the runner first sees it and every
  ``STATUS_SECONDS`` after;
* each node's Lease in ``kube-node-lease`` is renewed every ``RENEW_SECONDS``, a quarter
  of its duration as the kubelet does, so the node lifecycle controller never finds a node
  silent and never marks it NotReady or taints it;
* a pod of the runner's images bound to one of these nodes gets the next free address of
  the node's ``spec.podCIDR`` and the status KWOK's ``prefixroute-pod-assign`` stage writes
  (e2e/kwokconfig.py); the address is free again when the pod is deleted.

Pods of other images stay Pending: nothing plays them here (the e2e suite's cluster, with
KWOK, does). A node carries either KWOK's annotation or this one, never both, so the two
never drive one node. The decisions are pure functions; ``NodeKeeper`` is the I/O.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from e2e.kube import ApiError, Kube

log = logging.getLogger("podrunner.nodes")

RUNNER_NODE_ANNOTATION = ("e2e.prefixroute/node-keeper", "podrunner")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
"""The kubelet's default nodeLeaseDurationSeconds."""
RENEW_SECONDS = 10
"""The kubelet renews at a quarter of the lease's duration."""
STATUS_SECONDS = 60
SETTLE_SECONDS = 15
"""Rounds are a second apart until no new node has come for this long."""
"""How often the conditions' heartbeats are posted; the lease is what proves liveness."""

_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "the pod runner keeps this node"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("NetworkUnavailable", "False", "RouteCreated", "the pod CIDR is a local route"),
)


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def micro_time(t: float) -> str:
    """A Lease's MicroTime."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def is_runner_node(node: Mapping[str, Any]) -> bool:
    key, value = RUNNER_NODE_ANNOTATION
    return bool((node.get("metadata", {}).get("annotations") or {}).get(key) == value)


def node_status(node: Mapping[str, Any], host_ip: str, kubelet_port: int | None, now: float) -> dict[str, Any]:
    """The status a kubelet posts: conditions (transition times kept while the status does not
    change), addresses, the kubelet endpoint, allocatable as capacity."""
    status = node.get("status") or {}
    old = {c["type"]: c for c in status.get("conditions") or []}
    stamp = rfc3339(now)
    conditions = []
    for kind, value, reason, message in _CONDITIONS:
        same = old.get(kind, {}).get("status") == value
        since = old[kind].get("lastTransitionTime", stamp) if same else stamp
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": since,
            }
        )
    name = node["metadata"]["name"]
    capacity = status.get("capacity") or {"cpu": "32", "memory": "128Gi", "pods": "110"}
    out: dict[str, Any] = {
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": host_ip}, {"type": "Hostname", "address": name}],
        "capacity": capacity,
        "allocatable": status.get("allocatable") or capacity,
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "prefixroute-podrunner",
            "kubeProxyVersion": "prefixroute-podrunner",
            "containerRuntimeVersion": "prefixroute-podrunner",
            "kernelVersion": "",
            "osImage": "",
            "bootID": "",
            "machineID": "",
            "systemUUID": "",
        },
        "phase": "Running",
    }
    if kubelet_port is not None:
        out["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    return out


def lease(node: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The node's Lease as the kubelet writes it, owned by the node (deleted with it)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {"holderIdentity": meta["name"], "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_time(now)},
    }


def free_ip(cidr: str, taken: set[str]) -> str | None:
    """The lowest host address of ``cidr`` not in ``taken``; None when all are."""
    for address in ipaddress.ip_network(cidr).hosts():
        if str(address) not in taken:
            return str(address)
    return None


def assigned_status(pod: Mapping[str, Any], host_ip: str, pod_ip: str, now: float) -> dict[str, Any]:
    """What KWOK's ``prefixroute-pod-assign`` stage writes: the pod's IPs, Pending, its
    containers waiting in ContainerCreating, for the runner's worker to take from there."""
    stamp = rfc3339(now)

    def condition(kind: str, value: str, reason: str | None = None) -> dict[str, Any]:
        return {"type": kind, "status": value, "lastTransitionTime": stamp, **({"reason": reason} if reason else {})}

    return {
        "phase": "Pending",
        "startTime": stamp,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "conditions": [
            condition("PodReadyToStartContainers", "True"),
            condition("Initialized", "True"),
            condition("ContainersReady", "False", "ContainersNotReady"),
            condition("Ready", "False", "ContainersNotReady"),
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            for c in pod["spec"]["containers"]
        ],
    }


class NodeKeeper:
    """Keeps the runner's nodes Ready and their leases fresh; hands out pod IPs."""

    def __init__(self, kube: Kube, host_ip: str, kubelet_port: int | None):
        self.kube, self.host_ip, self.kubelet_port = kube, host_ip, kubelet_port
        self._ips: dict[str, tuple[str, str]] = {}  # pod uid -> (node, IP)
        self._lock = threading.Lock()

    # ------------------------------------------------------------ pod IPs

    def observe(self, pod: Mapping[str, Any]) -> None:
        """Note an IP a pod already has (a runner restarted on a running cluster)."""
        ip, node = pod.get("status", {}).get("podIP"), pod["spec"].get("nodeName")
        if ip and node:
            with self._lock:
                self._ips.setdefault(pod["metadata"]["uid"], (node, ip))

    def forget(self, uid: str) -> None:
        with self._lock:
            self._ips.pop(uid, None)

    def assign(self, pod: Mapping[str, Any]) -> None:
        """Give a pod bound to one of our nodes, still without one, its IP."""
        meta, node_name = pod["metadata"], pod["spec"].get("nodeName")
        if pod.get("status", {}).get("podIP") or meta.get("deletionTimestamp") or not node_name:
            return
        try:
            node = self.kube.get(f"/api/v1/nodes/{node_name}")
        except ApiError as e:  # the next event for this pod tries again
            log.warning("pod %s/%s: node %s: %s", meta["namespace"], meta["name"], node_name, e)
            return
        cidr = node.get("spec", {}).get("podCIDR")
        if not is_runner_node(node) or not cidr:
            return
        with self._lock:
            if meta["uid"] in self._ips:
                return
            ip = free_ip(cidr, {ip for n, ip in self._ips.values() if n == node_name})
            if ip is None:
                log.warning(
                    "node %s: no free address in %s for pod %s/%s", node_name, cidr, meta["namespace"], meta["name"]
                )
                return
            self._ips[meta["uid"]] = (node_name, ip)
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        body = {"metadata": {"uid": meta["uid"]}, "status": assigned_status(pod, self.host_ip, ip, time.time())}
        try:
            self.kube.patch(path, body)  # strategic: the scheduler's PodScheduled condition stays
        except ApiError as e:
            self.forget(meta["uid"])
            log.warning("pod %s/%s: assigning %s failed: %s", meta["namespace"], meta["name"], ip, e)
            return
        log.info("pod %s/%s: IP %s on %s", meta["namespace"], meta["name"], ip, node_name)

    # ------------------------------------------------------------ nodes and leases

    def _renew(self, node: Mapping[str, Any], now: float) -> None:
        name = node["metadata"]["name"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        body = lease(node, now)
        try:
            self.kube.patch(f"{path}/{name}", {"spec": body["spec"]}, kind="merge")
        except ApiError as e:
            if e.status != 404:
                raise
            self.kube.post(path, body)

    def tend(self, posted: dict[str, float], renewed: dict[str, float]) -> bool:
        """One round: each runner node's status posted and its lease renewed when due
        (``posted``, ``renewed``: node name -> when, updated here). True when a node was seen
        for the first time."""
        now, first_seen = time.time(), False
        for node in self.kube.get("/api/v1/nodes").get("items", []):
            if not is_runner_node(node):
                continue
            name = node["metadata"]["name"]
            first_seen |= name not in posted
            if now - posted.get(name, 0.0) >= STATUS_SECONDS:
                status = node_status(node, self.host_ip, self.kubelet_port, now)
                self.kube.patch(f"/api/v1/nodes/{name}/status", {"status": status})
                posted[name] = now
            if now - renewed.get(name, 0.0) >= RENEW_SECONDS:
                self._renew(node, now)
                renewed[name] = now
        return first_seen

    def run(self, stopping: threading.Event) -> None:
        posted: dict[str, float] = {}
        renewed: dict[str, float] = {}
        quiet_since = time.monotonic()
        while True:
            try:
                if self.tend(posted, renewed):
                    quiet_since = time.monotonic()
            except Exception as e:  # API server restarts, blips: the next round tries again
                log.warning("keeping the nodes: %s", e)
            # Every second until no new node has come for a while: `cluster up` makes the
            # nodes one by one and waits for all of them Ready.
            settling = not posted or time.monotonic() - quiet_since < SETTLE_SECONDS
            if stopping.wait(1.0 if settling else RENEW_SECONDS):
                return

    def start(self, stopping: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stopping,), name="nodes", daemon=True)
        thread.start()
        return thread
