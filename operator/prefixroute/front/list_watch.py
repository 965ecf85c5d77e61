"""Following one kind of object in the API server: list, then watch, in a daemon thread.

A front follows its resource's status.ring (`membership.kubernetes`) and its peers' endpoints
(`peer_discovery`) the same way: list, then watch from that list's resourceVersion (one
connection that carries only changes, so many models' fronts do not poll the API server),
and hand what changed to the event loop with `call_soon_threadsafe` (pykube-ng is
synchronous; the request path never waits on the API server). Any failure — API server
unreachable, 410 Gone, an expired token — ends the watch and lists again after a backoff
(1 s doubling to 30 s, reset once a list succeeds); what was handed last stays in force
meanwhile. Credentials are read again on every reconnect, so a rotated service-account
token is picked up.

`ListWatch` is that loop; a follower says what a list and each change mean (`listed`,
`changed`). The API server is reached through a small edge (list, watch, close): tests drive
the loop with a fake one; `PykubeWatch` is the real one's watch and close.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("prefixroute.front.list_watch")

WATCH_TIMEOUT_SECONDS = 240  # the server ends a watch after this; we list again and re-watch
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

Listed = TypeVar("Listed")
Listed_co = TypeVar("Listed_co", covariant=True)


class Edge(Protocol[Listed_co]):
    def list(self) -> tuple[Listed_co, str]:
        """What a list found, and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(event type, object) pairs after `resource_version`, until the server ends the watch."""
        ...

    def close(self) -> None:
        """Unblock a watch in progress (called from another thread)."""
        ...


class ListWatch(Generic[Listed]):
    """The loop; `what` names the object in log lines ('PrefixRoutedModel ns/name'), `keeping`
    what stays in force while it is retried ('the current fleet')."""

    def __init__(
        self, what: str, keeping: str, edge_factory: Callable[[], Edge[Listed]], backoff: tuple[float, float]
    ) -> None:
        self.what = what
        self.keeping = keeping
        self.edge_factory = edge_factory
        self.backoff_initial, self.backoff_max = backoff
        self._stopped = threading.Event()
        self._edge: Edge[Listed] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._apply: Callable[[Any], None] | None = None

    # -- what a follower says -------------------------------------------------

    def listed(self, found: Listed) -> None:
        """A list's answer (called on the watch thread)."""
        raise NotImplementedError

    def changed(self, kind: str, obj: Mapping[str, Any]) -> None:
        """An ADDED, MODIFIED or DELETED object (called on the watch thread)."""
        raise NotImplementedError

    def hand(self, value: object) -> None:
        """Give `value` to the follower's `apply` on the event loop (nothing once stopped)."""
        loop, apply = self._loop, self._apply
        if loop is None or apply is None or self._stopped.is_set():
            return
        try:
            loop.call_soon_threadsafe(apply, value)
        except RuntimeError:  # the loop closed while we were watching
            self._stopped.set()

    # -- the thread ----------------------------------------------------------------

    def begin(self, name: str, apply: Callable[[Any], None]) -> None:
        """Start the thread (`name`), handing what the follower makes of each change to `apply`."""
        self._loop = asyncio.get_running_loop()
        self._apply = apply
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
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
                log.debug("closing the watch of %s failed", self.what, exc_info=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)

    def _run(self) -> None:
        delay = self.backoff_initial
        while not self._stopped.is_set():
            try:
                self._edge = edge = self.edge_factory()
                found, version = edge.list()
                self.listed(found)
                delay = self.backoff_initial
                self._follow(edge, version)
                continue  # the server ended the watch: list and watch again
            except Exception as exc:
                if self._stopped.is_set():
                    return
                log.warning(
                    "watching %s failed (%s: %s); keeping %s, retrying in %.0f s",
                    self.what, type(exc).__name__, exc, self.keeping, delay,
                )  # fmt: skip
            self._stopped.wait(delay)
            delay = min(self.backoff_max, delay * 2)

    def _follow(self, edge: Edge[Listed], version: str) -> None:
        for kind, obj in edge.watch(version):
            if self._stopped.is_set():
                return
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.changed(kind, obj)
            elif kind == "ERROR":  # 410 Gone and the like
                log.info("watch of %s ended by the server (%s); listing again", self.what, _status_message(obj))
                return
            # BOOKMARK: nothing to do, the next list starts afresh anyway


def _status_message(obj: Mapping[str, Any]) -> str:
    code, message = obj.get("code"), obj.get("message")
    return f"{code} {message}" if code or message else "no detail"


# -- the real edge -------------------------------------------------------------------


def kube_config() -> Any:
    """KUBECONFIG when set, else the pod's service account (the in-cluster case)."""
    import pykube  # type: ignore[import-untyped]

    path = os.environ.get("KUBECONFIG")
    if path:
        return pykube.KubeConfig.from_file(path.split(os.pathsep)[0])
    return pykube.KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)


class PykubeWatch:
    """The watch and close of a pykube-ng edge over `query` (a filtered object query, set by the
    edge's constructor) and its client `api`."""

    api: Any
    query: Any
    _watch: Any = None

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
            shut_down(response)
            response.close()
        self.api.session.close()


def client(timeout: float = WATCH_TIMEOUT_SECONDS + 30) -> Any:
    """A pykube-ng client with the front's credentials; by default its read timeout (between
    bytes) outlasts the server's watch timeout, as a watch needs."""
    import pykube

    return pykube.HTTPClient(kube_config(), timeout=timeout)


def shut_down(response: Any) -> None:
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
