"""The kubelet's log endpoint for the pods the runner runs: what `kubectl logs` and the
operator's `get pods/log` reach through the API server.

The API server looks up the pod's node, takes its InternalIP and
status.daemonEndpoints.kubeletEndpoint.Port (every fake node says the runner's address and
port: e2e/kwokconfig.py) and asks, over TLS with its kubelet client certificate,
``GET /containerLogs/{namespace}/{pod}/{container}?tailLines=..&limitBytes=..&follow=..``.
This server answers from the container's log file (the selection is e2e/podlogs.py): 404 for
a pod the runner does not run, 400 with the reason for what it cannot answer. Clients must
present a certificate of the cluster's CA naming the API server's kubelet client; a real
kubelet asks the API server whether a user may, which the API server has already asked here.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from e2e import podlogs

log = logging.getLogger("podrunner")

API_SERVER_USER = "kube-apiserver-kubelet-client"
"""The user of the API server's --kubelet-client-certificate (e2e/pki.py)."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # namespace, pod and container names
_HANDSHAKE_SECONDS = 10.0


@dataclass(frozen=True)
class PodLogs:
    """One pod's logs as the runner keeps them."""

    folder: Path
    """Its log folder: a ``<container>.log`` per container that has started."""
    running: Callable[[str], bool]
    """Whether the named container's process runs now (a follow ends when it does not)."""


Locate = Callable[[str, str], PodLogs | None]
"""(namespace, pod) -> its logs, None for a pod the runner does not run."""


def tls_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """Serving with ``cert``; clients must present a certificate of ``client_ca``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.load_verify_locations(cafile=str(client_ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _common_name(peer: dict[str, Any] | None) -> str:
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class _Handler(BaseHTTPRequestHandler):
    server: KubeletServer

    def log_message(self, format: str, *args: object) -> None:
        log.debug("kubelet endpoint: " + format, *args)

    def setup(self) -> None:
        # The TLS handshake here, in this request's thread, not in the accepting one.
        self.request.settimeout(_HANDSHAKE_SECONDS)
        self.request.do_handshake()
        self.request.settimeout(None)
        super().setup()

    def _refuse(self, status: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        user = _common_name(self.request.getpeercert())
        if user not in self.server.allowed_users:
            self._refuse(403, f"user {user!r} may not read logs here")
            return
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs" or not all(_NAME.match(p) for p in parts[1:]):
            self._refuse(404, f"no such endpoint: {url.path}")
            return
        namespace, pod, container = parts[1:]
        try:
            query = podlogs.parse_query(url.query)
        except podlogs.LogQueryError as exc:
            self._refuse(400, str(exc))
            return
        logs = self.server.locate(namespace, pod)
        if logs is None:
            self._refuse(404, f"pod {namespace}/{pod} is not run by the pod runner")
            return
        self._answer(logs, container, query, f"{namespace}/{pod}")

    def _answer(self, logs: PodLogs, container: str, query: podlogs.LogQuery, where: str) -> None:
        file = logs.folder / f"{container}.log"
        try:
            whole = file.read_bytes()
            body = podlogs.select(whole, query)
        except FileNotFoundError:
            self._refuse(400, f'container "{container}" in pod {where} has not started')
            return
        except podlogs.LogQueryError as exc:
            self._refuse(400, f'container "{container}" in pod {where}: {exc}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if not (query.follow and not query.previous):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
        self.wfile.write(body)
        self.wfile.flush()
        left = None if query.limit_bytes is None else query.limit_bytes - len(body)
        self._follow(file, len(whole), left, lambda: logs.running(container))

    def _follow(self, file: Path, offset: int, left: int | None, running: Callable[[], bool]) -> None:
        """Writes what the run appends to ``file`` after ``offset`` until the process ends, it
        starts again, ``left`` bytes are written, the client goes or the runner stops."""
        while (left is None or left > 0) and not self.server.stopping.is_set():
            alive = running()  # asked before reading: output of a process already ended is in the file
            with file.open("rb") as f:
                f.seek(offset)
                appended = f.read()
            if not appended:
                if not alive:
                    return
                time.sleep(self.server.poll_seconds)
                continue
            offset += len(appended)
            chunk, ended = podlogs.until_restart(appended)
            chunk = chunk if left is None else chunk[:left]
            left = None if left is None else left - len(chunk)
            try:
                self.wfile.write(chunk)
                self.wfile.flush()
            except OSError:
                return  # the client went
            if ended:
                return


class KubeletServer(ThreadingHTTPServer):
    """The endpoint on ``host``:``port`` (0: a free port, then ``self.port``), serving until
    ``close``."""

    daemon_threads = True

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext,
        locate: Locate,
        *,
        allowed_users: tuple[str, ...] = (API_SERVER_USER,),
        poll_seconds: float = 0.2,
    ):
        self.tls, self.locate, self.allowed_users, self.poll_seconds = tls, locate, allowed_users, poll_seconds
        self.stopping = threading.Event()
        super().__init__((host, port), _Handler)
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, name="kubelet-endpoint", daemon=True)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # a refused handshake, a client gone: no traceback
            log.info("kubelet endpoint: %s: %s", client_address, error)
        else:
            log.warning("kubelet endpoint: a request from %s failed", client_address, exc_info=True)

    def start(self) -> KubeletServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()  # follows end
        self.shutdown()
        self.server_close()
