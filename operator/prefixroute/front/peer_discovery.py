"""--peers-service NAMESPACE/NAME: a front's peers are the addresses of a Service's endpoints.

The operator gives the router Deployment (and the EPP's) a Service; its EndpointSlices
(`kubernetes.io/service-name=NAME`, discovery.k8s.io/v1) list every replica's pod IP.
Each address that is serving (ready, or finishing its requests while terminating: its
load still counts) is a peer at `tcp://IP:--peer-port`; the front leaves its own address
out (`front.peers.PeerLink.follow`).

The slices are listed, then watched from that list's resourceVersion (one connection per
replica that carries only changes: a fleet of many models' routers does not poll the API
server), in a daemon thread that hands each new set of peers to the event loop with
`call_soon_threadsafe`, as the router's own membership watch does (`membership.kubernetes`).
Any failure ends the watch and lists again after a backoff (1 s doubling to 30 s); the last
set of peers stays in force meanwhile (a peer that went away falls silent and stops counting
anyway). The API server is reached through a small edge (`SliceEdge`), so tests drive the
loop with a fake one; the real one uses pykube-ng and the front's credentials.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

log = logging.getLogger("prefixroute.front.peers")

SERVICE_LABEL = "kubernetes.io/service-name"
WATCH_TIMEOUT_SECONDS = 240

Apply = Callable[[list[str]], None]


class SliceEdge(Protocol):
    def list(self) -> tuple[Sequence[Mapping[str, Any]], str]:
        """The Service's EndpointSlices and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(event type, slice) pairs after `resource_version`, until the server ends the watch."""
        ...

    def close(self) -> None:
        """Unblock a watch in progress (from another thread)."""
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


def _slice_name(piece: Mapping[str, Any]) -> str:
    return str((piece.get("metadata") or {}).get("name", ""))


class ServicePeers:
    """Follows the Service's endpoints and hands the peers' addresses to `apply` when they change."""

    def __init__(
        self,
        namespace: str,
        name: str,
        port: int,
        edge_factory: Callable[[], SliceEdge] | None = None,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.port = port
        self.edge_factory = edge_factory or (lambda: PykubeSliceEdge(namespace, name))
        self.backoff_initial, self.backoff_max = backoff
        self._stopped = threading.Event()
        self._edge: SliceEdge | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._apply: Apply | None = None
        self._last: list[str] | None = None

    async def start(self, apply: Apply) -> None:
        self._loop = asyncio.get_running_loop()
        self._apply = apply
        self._thread = threading.Thread(target=self._run, name=f"peers-{self.namespace}/{self.name}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        edge = self._edge
        if edge is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(edge.close), 2.0)
            except Exception:  # a close that fails or hangs; the thread is a daemon anyway
                log.debug("closing the endpoints watch failed", exc_info=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)

    def _run(self) -> None:
        delay = self.backoff_initial
        while not self._stopped.is_set():
            try:
                self._edge = edge = self.edge_factory()
                found, version = edge.list()
                slices = {_slice_name(p): p for p in found}
                self._deliver(slices)
                delay = self.backoff_initial
                for kind, piece in edge.watch(version):
                    if self._stopped.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED"):
                        slices[_slice_name(piece)] = piece
                    elif kind == "DELETED":
                        slices.pop(_slice_name(piece), None)
                    elif kind == "ERROR":
                        break  # 410 Gone and the like: list again
                    else:
                        continue  # BOOKMARK
                    self._deliver(slices)
                continue
            except Exception as exc:
                if self._stopped.is_set():
                    return
                log.warning(
                    "watching the endpoints of Service %s/%s failed (%s: %s); keeping the current peers, "
                    "retrying in %.0f s", self.namespace, self.name, type(exc).__name__, exc, delay,
                )  # fmt: skip
            self._stopped.wait(delay)
            delay = min(self.backoff_max, delay * 2)

    def _deliver(self, slices: Mapping[str, Mapping[str, Any]]) -> None:
        endpoints = peer_endpoints(list(slices.values()), self.port)
        if endpoints == self._last:
            return
        self._last = endpoints
        loop, apply = self._loop, self._apply
        if loop is None or apply is None or self._stopped.is_set():
            return
        try:
            loop.call_soon_threadsafe(apply, endpoints)
        except RuntimeError:  # the loop closed meanwhile
            self._stopped.set()


class PykubeSliceEdge:
    """The Service's EndpointSlices through pykube-ng (KUBECONFIG, else the pod's service account)."""

    def __init__(self, namespace: str, name: str) -> None:
        import pykube  # type: ignore[import-untyped]
        from pykube.objects import NamespacedAPIObject  # type: ignore[import-untyped]

        from prefixroute.front.membership.kubernetes import kube_config

        class EndpointSlice(NamespacedAPIObject):  # type: ignore[misc]  # untyped base
            version = "discovery.k8s.io/v1"
            endpoint = "endpointslices"
            kind = "EndpointSlice"

        self.api = pykube.HTTPClient(kube_config(), timeout=WATCH_TIMEOUT_SECONDS + 30)
        self.query = EndpointSlice.objects(self.api, namespace=namespace).filter(selector={SERVICE_LABEL: name})
        self._watch: Any = None

    def list(self) -> tuple[Sequence[Mapping[str, Any]], str]:
        body = self.query.execute().json()
        return body.get("items") or [], str((body.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        self._watch = self.query.watch(
            since=resource_version or None,
            params={"timeoutSeconds": WATCH_TIMEOUT_SECONDS, "allowWatchBookmarks": "true"},
        )
        for event in self._watch:
            yield event.type, event.object.obj

    def close(self) -> None:
        from prefixroute.front.membership.kubernetes import _shut_down

        watch = self._watch
        response = watch.response if watch is not None else None
        if response is not None:
            _shut_down(response)
            response.close()
        self.api.session.close()
