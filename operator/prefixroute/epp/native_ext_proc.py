"""The ext_proc streams served by compiled code (`ExtProcServer`, built from native/), each
message answered here by the request's `Exchange`, as the grpc.aio server answers it.

grpc.aio spent about 220 µs of CPU per message on HTTP/2, gRPC framing and a coroutine step
(`router-bench --grpc-floor`): three messages a buffered request, most of the picker's cost.
The compiled server does that part on a thread of its own and hands each message over as its
bytes; the event loop is woken through a socket pair when jobs wait and takes all of them at
once, so a busy picker pays one wake-up for many messages. A stream's messages arrive one at a
time, each after the answer to the one before, so an `Exchange` sees exactly what grpc.aio gave
it: a message, then (when the gate decides) `resolve()` before the next.

A stream the gateway resets while its choice waits for the gate cancels that wait, as
grpc.aio's cancellation does; a stream that ends or is reset after its answer is closed like
the grpc.aio stream's `finally`. `PREFIXROUTE_NATIVE_EPP=0`, or a build without native/, keeps
the grpc.aio server (`server.ExternalProcessor`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from prefixroute.epp.exchange import Exchange
from prefixroute.epp.protocol import ProcessingRequest
from prefixroute.front.pipeline import Pipeline

log = logging.getLogger("prefixroute.epp")

_module: Any = None
try:
    import prefixroute_native as _module
except ImportError:  # not built: the grpc.aio server serves
    _module = None
ExtProcServer: Any = getattr(_module, "ExtProcServer", None)  # None: a build without it
MESSAGE, ENDED, CANCELLED = _module.job_kinds() if ExtProcServer is not None else (0, 1, 2)

AVAILABLE = ExtProcServer is not None and os.environ.get("PREFIXROUTE_NATIVE_EPP", "1") != "0"

_Replies = list[bytes] | None


class NativeExtProc:
    """The compiled server on `host:port` and the event loop's side of it."""

    def __init__(self, pipeline: Pipeline, host: str, port: int, max_message: int = 64 * 1024 * 1024) -> None:
        if ExtProcServer is None:
            raise RuntimeError("the compiled ext_proc server is not built (native/)")
        self.pipeline = pipeline
        # grpc.aio took "[::]:port" (an IPv6 host in brackets); Rust's address parser wants "::".
        self._server: Any = ExtProcServer(host.removeprefix("[").removesuffix("]"), port, max_message)
        self.port: int = self._server.port
        self._exchanges: dict[int, Exchange] = {}  # open streams
        self._waits: dict[int, asyncio.Task[None]] = {}  # streams whose choice awaits the gate
        self._loop: asyncio.AbstractEventLoop | None = None

    def set_health(self, service: str, status: int) -> None:
        self._server.set_health(service, status)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._server.fileno(), self._drain)
        self._server.start()

    async def stop(self, grace: float) -> None:
        """Take no new streams; give those open `grace` seconds, then drop them. A stream dropped
        is closed as cancelled, as grpc.aio's stop cancels its handlers."""
        self._server.stop()
        # The wait is on a worker thread: the loop goes on answering the streams that finish.
        if self._server.running and not await asyncio.to_thread(self._server.join, grace):
            self._server.abort()
            await asyncio.to_thread(self._server.join)
        if self._loop is not None:
            self._loop.remove_reader(self._server.fileno())
            self._drain()  # the streams' last ends
        for task in list(self._waits.values()):
            task.cancel()  # its callback closes its exchange
        if self._waits:
            await asyncio.gather(*self._waits.values(), return_exceptions=True)
        for exchange in self._exchanges.values():
            exchange.close(True)
        self._exchanges.clear()
        if self._server.failure is not None:
            log.error("the ext_proc server stopped on its own: %s", self._server.failure)

    async def wait(self) -> None:
        await asyncio.to_thread(self._server.join)
        if self._server.failure is not None:
            log.error("the ext_proc server stopped on its own: %s", self._server.failure)

    @property
    def open_streams(self) -> int:
        """Streams the picker holds an exchange for (tests: none is left behind)."""
        return len(self._exchanges)

    def pending(self) -> int:
        """Messages handed over and not answered (tests: none is left behind)."""
        return int(self._server.pending())

    # -- the jobs -------------------------------------------------------------------

    def _drain(self) -> None:
        # Every job is handled whatever another one does: the queue is already emptied, and a
        # job dropped would leave its stream unanswered or its member counted for good.
        for token, stream, kind, payload, peer in self._server.take():
            try:
                if kind == MESSAGE:
                    self._message(token, stream, payload, peer)
                else:
                    self._closed(stream, cancelled=kind == CANCELLED)
            except Exception:  # a message that does not parse, or a bug: this stream ends with an error
                log.exception("ext_proc job failed")
                if kind == MESSAGE:
                    self._server.answer(token, None)

    def _message(self, token: int, stream: int, payload: bytes, peer: str | None) -> None:
        exchange = self._exchanges.get(stream)
        if exchange is None:
            pipeline = self.pipeline
            exchange = self._exchanges[stream] = Exchange(pipeline, None if pipeline.gate.open else peer)
        replies = exchange.on_message(ProcessingRequest.FromString(payload))
        if exchange.pending is not None:  # the gate decides, or a long prompt is keyed off the loop
            wait = asyncio.get_running_loop().create_task(self._resolve(token, exchange))
            self._waits[stream] = wait
            wait.add_done_callback(lambda task: self._resolved(task, stream, exchange))
            return
        self._server.answer(token, [reply.SerializeToString() for reply in replies])

    async def _resolve(self, token: int, exchange: Exchange) -> None:
        answer: _Replies = None
        try:
            answer = [reply.SerializeToString() for reply in await exchange.resolve()]
        except Exception:
            log.exception("ext_proc choice failed")
        self._server.answer(token, answer)

    def _resolved(self, wait: asyncio.Task[None], stream: int, exchange: Exchange) -> None:
        """A wait for the gate is over. Cancelled (the gateway left while the gate held the
        request, even before the wait began): the exchange is closed as grpc.aio's `finally`
        closes it, after the wait has unwound."""
        if self._waits.get(stream) is wait:
            del self._waits[stream]
        if wait.cancelled():
            self._exchanges.pop(stream, None)
            exchange.close(True)

    def _closed(self, stream: int, cancelled: bool) -> None:
        wait = self._waits.get(stream)
        if wait is not None and not wait.done():
            wait.cancel()  # `_resolved` closes the exchange once the wait has unwound
            return
        exchange = self._exchanges.pop(stream, None)
        if exchange is not None:
            exchange.close(cancelled)
