"""--inference-pool NAMESPACE/NAME: the members are a GIE InferencePool's ready pods.

For a picker that serves an InferencePool someone else made (no PrefixRoutedModel, so no
status.ring): the pool's `spec.selector.matchLabels` and first `targetPorts` number name the
pods and the port; a member is a pod that is Ready, has an IP and is not being deleted, named
by the pod. The pool and its pods are read again every `interval` seconds (`front.api_poll`:
a list in a thread; any failure keeps the last fleet, logged once per kind of failure); a
pool that is gone empties the fleet.

The API server is reached through a small edge (`PoolEdge`), so tests drive the loop with a
fake one; the real one uses pykube-ng and the router's credentials (`list_watch.client`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prefixroute.crd import POOL_API_VERSION, POOL_PLURAL
from prefixroute.front.api_poll import ApiPoll
from prefixroute.front.membership.base import ApplyFleet
from prefixroute.routing.fleet import Fleet, Member

log = logging.getLogger("prefixroute.front.membership")


class PoolEdge(Protocol):
    def pool(self) -> Mapping[str, Any] | None:
        """The InferencePool, or None when it does not exist."""
        ...

    def pods(self, selector: Mapping[str, str]) -> Sequence[Mapping[str, Any]]:
        """The pods of the pool's namespace matching `selector`."""
        ...


def _ready(pod: Mapping[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    conditions = status.get("conditions") or []
    return (
        not meta.get("deletionTimestamp")
        and bool(status.get("podIP"))
        and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    )


def fleet_from_pool(pool: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], virtual_nodes: int) -> Fleet:
    """The fleet a pool and its pods describe (an empty one without a pool)."""
    if pool is None:
        return Fleet((), virtual_nodes)
    ports = (pool.get("spec") or {}).get("targetPorts") or []
    if not ports or not isinstance(ports[0].get("number"), int):
        raise ValueError("the InferencePool names no target port")
    port = ports[0]["number"]
    members = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        if _ready(pod):
            ip = str(pod["status"]["podIP"])
            host = f"[{ip}]" if ":" in ip else ip
            members.append(Member(name=str(pod["metadata"]["name"]), url=f"http://{host}:{port}"))
    return Fleet(tuple(members), virtual_nodes, version=str((pool.get("metadata") or {}).get("resourceVersion", "")))


def selector_of(pool: Mapping[str, Any]) -> dict[str, str]:
    labels = ((pool.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    if not labels:
        raise ValueError("the InferencePool selects no pods (spec.selector.matchLabels is empty)")
    return {str(k): str(v) for k, v in labels.items()}


class InferencePoolSource:
    def __init__(
        self,
        namespace: str,
        name: str,
        virtual_nodes: int,
        interval: float = 1.0,
        edge_factory: Callable[[], PoolEdge] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.virtual_nodes = virtual_nodes
        self.edge_factory = edge_factory or (lambda: PykubePoolEdge(namespace, name))
        self._edge: PoolEdge | None = None
        self._poll: ApiPoll[Fleet] = ApiPoll(
            f"InferencePool {namespace}/{name}",
            self.read,
            interval,
            log,
            key=lambda fleet: tuple((m.name, m.url) for m in fleet.members),
            on_failure=self._drop_edge,  # new credentials and connection next time
        )

    @property
    def interval(self) -> float:
        return self._poll.interval

    def read(self) -> Fleet:
        """The fleet now (blocking: runs in a thread). Raises on any failure."""
        if self._edge is None:
            self._edge = self.edge_factory()
        pool = self._edge.pool()
        pods = self._edge.pods(selector_of(pool)) if pool is not None else []
        return fleet_from_pool(pool, pods, self.virtual_nodes)

    def _drop_edge(self) -> None:
        self._edge = None

    async def poll(self, apply: ApplyFleet) -> None:
        await self._poll.poll(apply)

    async def start(self, apply: ApplyFleet) -> None:
        await self._poll.start(apply)

    async def stop(self) -> None:
        await self._poll.stop()


class PykubePoolEdge:
    """The pool and its pods through pykube-ng (KUBECONFIG, else the pod's service account)."""

    def __init__(self, namespace: str, name: str) -> None:

        from prefixroute.front.list_watch import client

        self.namespace = namespace
        self.name = name
        self.api = client(timeout=10)

    def pool(self) -> Mapping[str, Any] | None:
        resp = self.api.get(version=POOL_API_VERSION, namespace=self.namespace, url=f"{POOL_PLURAL}/{self.name}")
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        body: Mapping[str, Any] = resp.json()
        return body

    def pods(self, selector: Mapping[str, str]) -> Sequence[Mapping[str, Any]]:
        params = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))}
        resp = self.api.get(version="v1", namespace=self.namespace, url="pods", params=params)
        resp.raise_for_status()
        items: Sequence[Mapping[str, Any]] = resp.json().get("items") or []
        return items
