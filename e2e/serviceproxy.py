"""Service ClusterIPs that answer: a small userspace proxy, as kube-proxy's first mode was.

The Service CIDR is a local route in the cluster's namespace, so the pod runner can
listen on every Service's ClusterIP:port (TCP) and hand each connection to a ready
endpoint of that port, picked at random from the Service's EndpointSlices — so
``http://<clusterIP>:<port>`` and, through the pods' /etc/hosts, ``http://name.namespace:port``
reach the pods behind a Service. Headless Services and UDP are not served; readiness
comes from the EndpointSlice conditions the controller-manager derives from pod readiness.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Mapping
from typing import Any

from e2e.kube import Kube

log = logging.getLogger("serviceproxy")

Key = tuple[str, int]  # (clusterIP, port)


def backends(
    service: Mapping[str, Any], port: Mapping[str, Any], slices: list[Mapping[str, Any]]
) -> list[tuple[str, int]]:
    """Ready (ip, port) pairs for one Service port, from its EndpointSlices."""
    name = port.get("name", "")
    out = []
    for s in slices:
        numbers = [p.get("port") for p in s.get("ports") or [] if p.get("name", "") == name and p.get("port")]
        if not numbers:
            continue
        for ep in s.get("endpoints") or []:
            if ep.get("conditions", {}).get("ready", True):
                out.extend((addr, int(numbers[0])) for addr in ep["addresses"])
    return out


def host_names(names: Mapping[str, tuple[str, str]], namespace: str) -> dict[str, list[str]]:
    """/etc/hosts entries for the Services, as a pod in ``namespace`` would resolve them."""
    out = {}
    for ip, (ns, name) in sorted(names.items()):
        if (ns, name) == ("default", "kubernetes"):
            continue  # pods reach the API server at its own address (KUBERNETES_SERVICE_HOST)
        out[ip] = [f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}.svc", f"{name}.{ns}"] + (
            [name] if ns == namespace else []
        )
    return out


class ServiceProxy:
    def __init__(self, kube: Kube, interval: float = 1.0):
        self.kube = kube
        self.interval = interval
        self.services: dict[str, Mapping[str, Any]] = {}  # "ns/name" -> Service
        self.routes: dict[Key, list[tuple[str, int]]] = {}
        self.servers: dict[Key, asyncio.base_events.Server] = {}
        self.names: dict[str, tuple[str, str]] = {}  # clusterIP -> (namespace, name), for /etc/hosts
        self._loop = asyncio.new_event_loop()

    def start(self, stopping: threading.Event) -> None:
        threading.Thread(target=self._run, args=(stopping,), name="serviceproxy", daemon=True).start()

    def _run(self, stopping: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._sync_forever(stopping))

    async def _sync_forever(self, stopping: threading.Event) -> None:
        while not stopping.is_set():
            try:
                services, slices = await asyncio.to_thread(self._fetch)
                await self._apply(services, slices)
            except Exception as e:  # the API server restarting, say: try again
                log.warning("service sync: %s", e)
            await asyncio.sleep(self.interval)
        for server in self.servers.values():
            server.close()

    def _fetch(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return (
            self.kube.get("/api/v1/services")["items"],
            self.kube.get("/apis/discovery.k8s.io/v1/endpointslices")["items"],
        )

    async def _apply(self, services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> None:
        by_service: dict[str, list[dict[str, Any]]] = {}
        for s in slices:
            owner = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                by_service.setdefault(f"{s['metadata']['namespace']}/{owner}", []).append(s)
        routes: dict[Key, list[tuple[str, int]]] = {}
        names: dict[str, tuple[str, str]] = {}
        for svc in services:
            ip = svc["spec"].get("clusterIP")
            if not ip or ip == "None":
                continue
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            names[ip] = (ns, name)
            for port in svc["spec"].get("ports", []):
                if port.get("protocol", "TCP") == "TCP":
                    routes[(ip, int(port["port"]))] = backends(svc, port, by_service.get(f"{ns}/{name}", []))
        self.routes, self.names = routes, names
        for key in [k for k in self.servers if k not in routes]:
            self.servers.pop(key).close()
        for key in routes:
            if key not in self.servers:
                try:
                    self.servers[key] = await asyncio.start_server(
                        lambda r, w, key=key: self._handle(key, r, w), host=key[0], port=key[1]
                    )
                except OSError as e:
                    log.warning("cannot listen on %s:%d: %s", key[0], key[1], e)

    async def _handle(self, key: Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        candidates = list(self.routes.get(key, []))
        random.shuffle(candidates)
        upstream = None
        for host, port in candidates[:3]:  # a backend that just went away: try another
            try:
                upstream = await asyncio.wait_for(asyncio.open_connection(host, port), 3)
                break
            except (TimeoutError, OSError):
                continue
        if upstream is None:
            writer.close()  # no ready endpoint: refuse, as kube-proxy rejects
            return
        up_reader, up_writer = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                try:
                    if dst.can_write_eof():
                        dst.write_eof()
                except OSError:
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()
