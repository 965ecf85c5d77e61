"""--resource NAMESPACE/NAME: follow the PrefixRoutedModel's status.ring in Kubernetes.

The operator publishes the ring (ready engine pods, weights, a version) in the
resource's status; the router lists the one object, then watches it from that
resourceVersion and turns each new status.ring into a Fleet. pykube-ng is
synchronous, so the list/watch loop runs in a daemon thread and hands fleets to
the event loop with `call_soon_threadsafe`; the request path never waits on the
API server.

Any failure — API server unreachable, 410 Gone, a token that expired, an object
that does not exist yet — ends the current watch and starts over with a fresh
list after a backoff (1 s doubling to 30 s, reset once a list succeeds), and the
router keeps its last fleet meanwhile. Credentials are read again on every
reconnect, so a rotated service-account token is picked up. A deleted resource
empties the fleet (the router then answers 503 and /ready fails).

The API server is reached through a small edge (`WatchEdge`: list, watch, close);
tests drive the loop with a fake edge, the e2e suite with a real API server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prefixroute.crd import API_VERSION, KIND, PLURAL
from prefixroute.front.membership.base import ApplyFleet
from prefixroute.routing.fleet import Fleet, fleet_from_ring_document

log = logging.getLogger("prefixroute.front.membership")

WATCH_TIMEOUT_SECONDS = 240  # the server ends a watch after this; we list again and re-watch
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class WatchEdge(Protocol):
    def list(self) -> tuple[Mapping[str, Any] | None, str]:
        """The resource (None when it does not exist) and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(event type, object) pairs after `resource_version`, until the server ends the watch."""
        ...

    def close(self) -> None:
        """Unblock a watch in progress (called from another thread)."""
        ...


def ring_document(resource: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """status.ring of a PrefixRoutedModel; an empty ring when there is none yet."""
    if not resource:
        return {"members": []}
    status = resource.get("status")
    ring = status.get("ring") if isinstance(status, Mapping) else None
    return ring if isinstance(ring, Mapping) else {"members": []}


def fleet_from_resource(resource: Mapping[str, Any] | None, virtual_nodes: int) -> Fleet:
    """The fleet a PrefixRoutedModel's status describes (raises ValueError for a malformed ring)."""
    return fleet_from_ring_document(ring_document(resource), virtual_nodes)


class KubernetesSource:
    def __init__(
        self,
        namespace: str,
        name: str,
        virtual_nodes: int,
        edge_factory: Callable[[], WatchEdge] | None = None,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.virtual_nodes = virtual_nodes
        self.edge_factory = edge_factory or (lambda: PykubeEdge(namespace, name))
        self.backoff_initial, self.backoff_max = backoff
        self._stopped = threading.Event()
        self._edge: WatchEdge | None = None
        self._thread: threading.Thread | None = None
        self._last_ring: Any = object()  # nothing delivered yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._apply: ApplyFleet | None = None

    async def start(self, apply: ApplyFleet) -> None:
        self._loop = asyncio.get_running_loop()
        self._apply = apply
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.namespace}/{self.name}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        edge = self._edge
        if edge is not None:
            # In a thread, and bounded: whatever a client library does while closing a
            # blocked read, the event loop (and SIGTERM handling) never waits on it.
            try:
                await asyncio.wait_for(asyncio.to_thread(edge.close), 2.0)
            except Exception:  # a close that fails or hangs; the watch thread is a daemon anyway
                log.debug("closing the watch failed", exc_info=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)

    # -- the watch thread ------------------------------------------------------

    def _run(self) -> None:
        delay = self.backoff_initial
        while not self._stopped.is_set():
            try:
                self._edge = edge = self.edge_factory()
                resource, version = edge.list()
                if resource is None:
                    log.warning("PrefixRoutedModel %s/%s not found; waiting for it", self.namespace, self.name)
                self._deliver(resource)
                delay = self.backoff_initial
                for kind, obj in edge.watch(version):
                    if self._stopped.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED"):
                        self._deliver(obj)
                    elif kind == "DELETED":
                        log.warning("PrefixRoutedModel %s/%s was deleted; no members left", self.namespace, self.name)
                        self._deliver(None)
                    elif kind == "ERROR":
                        log.info(
                            "watch of %s/%s ended by the server (%s); listing again",
                            self.namespace,
                            self.name,
                            _status_message(obj),
                        )
                        break
                    # BOOKMARK: nothing to do, the next list starts afresh anyway
                continue  # the server ended the watch normally: list and watch again
            except Exception as exc:
                if self._stopped.is_set():
                    return
                log.warning(
                    "watching PrefixRoutedModel %s/%s failed (%s: %s); retrying in %.0f s",
                    self.namespace,
                    self.name,
                    type(exc).__name__,
                    exc,
                    delay,
                )
            self._stopped.wait(delay)
            delay = min(self.backoff_max, delay * 2)

    def _deliver(self, resource: Mapping[str, Any] | None) -> None:
        """Hand a new ring to the loop; unchanged rings (status updates of other fields) are skipped."""
        ring = ring_document(resource)
        if ring == self._last_ring:
            return
        try:
            fleet = fleet_from_ring_document(ring, self.virtual_nodes)
        except (ValueError, TypeError) as exc:
            log.warning(
                "status.ring of %s/%s is malformed (%s); keeping the current fleet", self.namespace, self.name, exc
            )
            return
        self._last_ring = ring
        loop, apply = self._loop, self._apply
        if loop is None or apply is None or self._stopped.is_set():
            return
        try:
            loop.call_soon_threadsafe(apply, fleet)
        except RuntimeError:  # the loop closed while we were watching
            self._stopped.set()


def _status_message(obj: Mapping[str, Any]) -> str:
    code, message = obj.get("code"), obj.get("message")
    return f"{code} {message}" if code or message else "no detail"


# -- the real edge -------------------------------------------------------------


def kube_config() -> Any:
    """KUBECONFIG when set, else the pod's service account (the in-cluster case)."""
    import pykube  # type: ignore[import-untyped]

    path = os.environ.get("KUBECONFIG")
    if path:
        return pykube.KubeConfig.from_file(path.split(os.pathsep)[0])
    return pykube.KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)


class PykubeEdge:
    """List and watch one PrefixRoutedModel with pykube-ng."""

    def __init__(self, namespace: str, name: str) -> None:
        import pykube
        from pykube.objects import NamespacedAPIObject  # type: ignore[import-untyped]

        class PrefixRoutedModel(NamespacedAPIObject):  # type: ignore[misc]  # untyped base
            version = API_VERSION
            endpoint = PLURAL
            kind = KIND

        self.name = name
        # The client timeout is a read timeout between bytes: longer than the server's watch timeout.
        self.api = pykube.HTTPClient(kube_config(), timeout=WATCH_TIMEOUT_SECONDS + 30)
        self.query = PrefixRoutedModel.objects(self.api, namespace=namespace).filter(
            field_selector={"metadata.name": name}
        )
        self._watch: Any = None

    def list(self) -> tuple[Mapping[str, Any] | None, str]:
        body = self.query.execute().json()
        items = body.get("items") or []
        version = str(body.get("metadata", {}).get("resourceVersion", ""))
        return (items[0] if items else None), version

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        self._watch = self.query.watch(
            since=resource_version or None,
            params={"timeoutSeconds": WATCH_TIMEOUT_SECONDS, "allowWatchBookmarks": "true"},
        )
        for event in self._watch:
            yield event.type, event.object.obj

    def close(self) -> None:
        watch = self._watch
        response = watch.response if watch is not None else None
        if response is not None:
            _shut_down(response)
            response.close()
        self.api.session.close()


def _shut_down(response: Any) -> None:
    """Wake the watch thread blocked reading ``response``: shut its socket down.

    Closing alone is not enough: the blocked read holds the response's buffer lock, so
    close() would wait for the next byte of a quiet watch — up to the read timeout, long
    after SIGTERM (the router then outlived every pod's grace period).
    """
    raw = getattr(response, "raw", None)
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if sock is None:  # urllib3 hands the connection to http.client's response
        fp = getattr(getattr(raw, "_fp", None), "fp", None)
        sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed or never connected
        pass
