"""--peers-service NAMESPACE/NAME: a front's peers are the addresses of a Service's endpoints.

The operator gives the router Deployment (and the EPP's) a Service; its EndpointSlices
(`kubernetes.io/service-name=NAME`, discovery.k8s.io/v1) list every replica's pod IP.
Each address that is serving (ready, or finishing its requests while terminating: its
load still counts) is a peer at `tcp://IP:--peer-port`; the front leaves its own address
out (`front.peers.PeerLink.follow`). The slices are read every `interval` seconds (a list,
not a watch: a front has a handful of replicas, and a list cannot miss an event), in a
thread, so the event loop never waits on the API server; a failure keeps the last set
and is logged once per kind of failure.

The API server is reached through a small edge (`SliceEdge`), so tests drive the loop with
a fake one; the real one uses pykube-ng and the front's credentials.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prefixroute.front.background import cancel_and_wait

log = logging.getLogger("prefixroute.front.peers")

SERVICE_LABEL = "kubernetes.io/service-name"


class SliceEdge(Protocol):
    def slices(self) -> Sequence[Mapping[str, Any]]:
        """The Service's EndpointSlices."""
        ...


def peer_endpoints(slices: Sequence[Mapping[str, Any]], port: int) -> list[str]:
    """tcp://ADDRESS:port for every serving address of the slices, sorted, each once."""
    found: set[str] = set()
    for piece in slices:
        for item in piece.get("endpoints") or []:
            conditions = item.get("conditions") or {}
            serving = conditions.get("serving", conditions.get("ready"))
            if serving is False:
                continue
            for address in item.get("addresses") or []:
                host = f"[{address}]" if ":" in address else address
                found.add(f"tcp://{host}:{port}")
    return sorted(found)


class ServicePeers:
    """Reads the Service's endpoints now and then and hands the peers' addresses to `apply`."""

    def __init__(
        self,
        namespace: str,
        name: str,
        port: int,
        interval: float = 2.0,
        edge_factory: Callable[[], SliceEdge] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.port = port
        self.interval = interval
        self.edge_factory = edge_factory or (lambda: PykubeSliceEdge(namespace, name))
        self._edge: SliceEdge | None = None
        self._last: list[str] | None = None
        self._problem = ""
        self._task: asyncio.Task[None] | None = None

    def read(self) -> list[str]:
        """The peers' endpoints now (blocking: runs in a thread). Raises on any failure."""
        if self._edge is None:
            self._edge = self.edge_factory()
        return peer_endpoints(self._edge.slices(), self.port)

    async def poll(self, apply: Callable[[list[str]], None]) -> None:
        try:
            endpoints = await asyncio.to_thread(self.read)
        except Exception as exc:  # keep the last peers; say so once per kind of failure
            self._edge = None
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._problem:
                log.warning("reading the endpoints of Service %s/%s failed (%s); keeping the current peers",
                            self.namespace, self.name, problem)  # fmt: skip
            self._problem = problem
            return
        self._problem = ""
        if endpoints != self._last:
            self._last = endpoints
            apply(endpoints)

    async def start(self, apply: Callable[[list[str]], None]) -> None:
        await self.poll(apply)
        self._task = asyncio.create_task(self._run(apply), name="peers-service-poll")

    async def _run(self, apply: Callable[[list[str]], None]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.poll(apply)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


class PykubeSliceEdge:
    """The Service's EndpointSlices through pykube-ng (KUBECONFIG, else the pod's service account)."""

    def __init__(self, namespace: str, name: str) -> None:
        import pykube  # type: ignore[import-untyped]

        from prefixroute.front.membership.kubernetes import kube_config

        self.namespace = namespace
        self.name = name
        self.api = pykube.HTTPClient(kube_config(), timeout=10)

    def slices(self) -> Sequence[Mapping[str, Any]]:
        params = {"labelSelector": f"{SERVICE_LABEL}={self.name}"}
        resp = self.api.get(
            version="discovery.k8s.io/v1", namespace=self.namespace, url="endpointslices", params=params
        )
        resp.raise_for_status()
        items: Sequence[Mapping[str, Any]] = resp.json().get("items") or []
        return items
