"""--peers-service NAMESPACE/NAME: a front's peers are the addresses of a Service's endpoints.

The operator gives the router Deployment (and the EPP's) a Service; its EndpointSlices
(`kubernetes.io/service-name=NAME`, discovery.k8s.io/v1) list every replica's pod IP.
Each address that is serving (ready, or finishing its requests while terminating: its
load still counts) is a peer at `tcp://IP:--peer-port`; the front leaves its own address
out (`front.peers.PeerLink.follow`).

The slices are listed, then watched from that list's resourceVersion, as the router's own
membership watch does (`front.list_watch`: a daemon thread handing each new set of peers to
the event loop; after any failure a backoff, the last set of peers in force meanwhile — a peer
that went away falls silent and stops counting anyway). The API server is reached through a
small edge (`SliceEdge`), so tests drive the loop with a fake one; the real one uses pykube-ng
and the front's credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prefixroute.front.list_watch import Edge, ListWatch, PykubeWatch, client

log = logging.getLogger("prefixroute.front.peers")

SERVICE_LABEL = "kubernetes.io/service-name"

Apply = Callable[[list[str]], None]
SliceEdge = Edge[Sequence[Mapping[str, Any]]]  # the Service's EndpointSlices


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


def _slice_name(piece: Mapping[str, Any]) -> str:
    return str((piece.get("metadata") or {}).get("name", ""))


class ServicePeers(ListWatch[Sequence[Mapping[str, Any]]]):
    """Follows the Service's endpoints and hands the peers' addresses to `apply` when they change."""

    def __init__(
        self,
        namespace: str,
        name: str,
        port: int,
        edge_factory: Callable[[], SliceEdge] | None = None,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        super().__init__(
            f"the endpoints of Service {namespace}/{name}",
            "the current peers",
            edge_factory or (lambda: PykubeSliceEdge(namespace, name)),
            backoff,
        )
        self.namespace = namespace
        self.name = name
        self.port = port
        self._last: list[str] | None = None
        self._slices: dict[str, Mapping[str, Any]] = {}

    async def start(self, apply: Apply) -> None:
        self.begin(f"peers-{self.namespace}/{self.name}", apply)

    def listed(self, found: Sequence[Mapping[str, Any]]) -> None:
        self._slices = {_slice_name(p): p for p in found}
        self._deliver()

    def changed(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self._slices.pop(_slice_name(obj), None)
        else:
            self._slices[_slice_name(obj)] = obj
        self._deliver()

    def _deliver(self) -> None:
        endpoints = peer_endpoints(list(self._slices.values()), self.port)
        if endpoints == self._last:
            return
        self._last = endpoints
        self.hand(endpoints)


class PykubeSliceEdge(PykubeWatch):
    """The Service's EndpointSlices through pykube-ng (KUBECONFIG, else the pod's service account)."""

    def __init__(self, namespace: str, name: str) -> None:
        from pykube.objects import NamespacedAPIObject  # type: ignore[import-untyped]

        class EndpointSlice(NamespacedAPIObject):  # type: ignore[misc]  # untyped base
            version = "discovery.k8s.io/v1"
            endpoint = "endpointslices"
            kind = "EndpointSlice"

        self.api = client()
        self.query = EndpointSlice.objects(self.api, namespace=namespace).filter(selector={SERVICE_LABEL: name})

    def list(self) -> tuple[Sequence[Mapping[str, Any]], str]:
        body = self.query.execute().json()
        return body.get("items") or [], str((body.get("metadata") or {}).get("resourceVersion", ""))
