"""gRPC health (grpc.health.v1) for the EPP's probes, and the tiny HTTP server for /metrics.

Readiness is the service "" (and the ext_proc service's own name): SERVING while at least
one member is routable and not ejected, as the router's /ready. Liveness is the service
"liveness": SERVING as long as the process answers. Readiness is recomputed every
`interval` seconds and whenever the fleet changes, so an ejection that expires brings the
picker back without a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from prefixroute.front.state import FrontState

log = logging.getLogger("prefixroute.epp")

LIVENESS = "liveness"
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Readiness:
    def __init__(self, state: FrontState, interval: float = 1.0) -> None:
        self.state = state
        self.interval = interval
        self.servicer = HealthServicer()
        # Others answering Health/Check (the compiled ext_proc server's port): told each change.
        self.mirrors: list[Callable[[str, int], None]] = []
        self._ready: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._set(LIVENESS, SERVING)
        await self.update()
        self._task = asyncio.create_task(self._run(), name="epp-readiness")

    async def update(self) -> None:
        ready = bool(self.state.ready_members())
        if ready == self._ready:
            return
        self._ready = ready
        status = SERVING if ready else NOT_SERVING
        for service in ("", EXT_PROC_SERVICE):
            await self._set(service, status)
        log.info("readiness: %s", "serving" if ready else "not serving (no ready member)")

    async def _set(self, service: str, status: int) -> None:
        await self.servicer.set(service, status)
        for mirror in self.mirrors:
            mirror(service, status)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.update()
            except Exception:  # never let a bug stop readiness updates for good
                log.exception("readiness update failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.servicer.enter_graceful_shutdown()  # every service NOT_SERVING: the picker drains
        for mirror in self.mirrors:
            for service in ("", EXT_PROC_SERVICE, LIVENESS):
                mirror(service, NOT_SERVING)


async def serve_metrics(state: FrontState, host: str, port: int) -> asyncio.Server:
    """GET /metrics on the event loop (so a scrape reads the state on the thread that
    changes it); anything else is a 404. One request per connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.split()
            if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
                body, status = state.metrics.render(), b"200 OK"
                kind = b"text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, kind = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
