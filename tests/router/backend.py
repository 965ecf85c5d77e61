"""A tiny OpenAI-compatible engine for router tests: real HTTP on 127.0.0.1, scripted behaviour.

Each backend records what it received and can be told to fail in the ways the
router must survive: a 5xx before the first byte, a connection dropped before the
answer, a stream cut after some chunks, an answer that never comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


# Chunks of one SSE stream, deliberately split at odd places (mid-event, mid-UTF-8
# character) so a relay that re-parses or re-frames anything shows up in a byte compare.
def sse_chunks(name: str) -> list[bytes]:
    events = []
    for _i, piece in enumerate(["Hel", "lo ", "wörld ", "✓", ""]):
        chunk = {
            "id": f"cmpl-{name}",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": piece, "finish_reason": "stop" if piece == "" else None}],
        }
        events.append(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    blob = b"".join(events)
    # cut into uneven pieces, one of them inside the multi-byte characters
    cuts = [7, 40, blob.index("ö".encode()) + 1, len(blob) // 2, len(blob) - 5]
    pieces, start = [], 0
    for cut in sorted(set(cuts)):
        pieces.append(blob[start:cut])
        start = cut
    pieces.append(blob[start:])
    return [p for p in pieces if p]


def chat_sse_chunks(name: str) -> list[bytes]:
    out = []
    for i, piece in enumerate(["Hi", " there", ""]):
        delta: dict[str, Any] = {"content": piece} if piece else {}
        if i == 0:
            delta["role"] = "assistant"
        chunk = {
            "id": f"chatcmpl-{name}",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if not piece else None}],
        }
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


@dataclass
class Behaviour:
    status: int = 200  # status of every answer (5xx to test failover)
    drop_before_answer: bool = False  # close the connection without answering
    cut_stream_after: int | None = None  # chunks sent before the connection is cut
    hang: bool = False  # never answer
    cut_body: bool = False  # declare a Content-Length, send half of it, close
    chunk_delay: float = 0.0  # seconds between stream chunks
    answer_delay: float = 0.0  # seconds before any answer (a busy engine)
    metrics_text: str = ""


@dataclass
class FakeEngine:
    name: str
    behaviour: Behaviour = field(default_factory=Behaviour)
    received: list[dict[str, Any]] = field(default_factory=list)
    raw_bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port or self.port)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _answer(self, request: web.Request, chat: bool) -> web.StreamResponse:
        raw = await request.read()
        self.raw_bodies.append(raw)
        self.headers.append(dict(request.headers))
        body = json.loads(raw)
        self.received.append(body)
        b = self.behaviour
        if b.answer_delay:
            await asyncio.sleep(b.answer_delay)
        if b.hang:
            await asyncio.sleep(3600)
        if b.drop_before_answer:
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(0.05)
            return web.Response()
        if b.cut_body:
            out = web.StreamResponse(headers={"Content-Type": "application/json"})
            out.content_length = 100
            await out.prepare(request)
            await out.write(b'{"id": "half')
            await asyncio.sleep(0.01)
            assert request.transport is not None
            request.transport.close()
            return out
        if b.status >= 400:
            return web.json_response(
                {"error": {"message": f"{self.name} failed", "type": "server_error", "param": None, "code": None}},
                status=b.status,
            )
        if body.get("stream"):
            chunks = chat_sse_chunks(self.name) if chat else sse_chunks(self.name)
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Engine": self.name})
            await out.prepare(request)
            for i, chunk in enumerate(chunks):
                if b.cut_stream_after is not None and i >= b.cut_stream_after:
                    assert request.transport is not None
                    request.transport.close()
                    return out
                await out.write(chunk)
                if b.chunk_delay:
                    await asyncio.sleep(b.chunk_delay)
            await out.write_eof()
            return out
        if chat:
            answer = {
                "id": f"chatcmpl-{self.name}",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model", "m"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"from {self.name}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            }
        else:
            answer = {
                "id": f"cmpl-{self.name}",
                "object": "text_completion",
                "created": 1,
                "model": body.get("model", "m"),
                "choices": [{"index": 0, "text": f"from {self.name}", "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            }
        return web.json_response(answer, headers={"X-Engine": self.name})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat=True)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        if self.behaviour.status != 200:
            return web.json_response({"error": {"message": "refused", "type": "x"}}, status=self.behaviour.status)
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": self.name}]})

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=self.behaviour.metrics_text, content_type="text/plain")


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """The URL of a listener whose accept queue is full, so the kernel drops further SYNs: a
    connect there hangs until the client's timeout, as to a dead node whose pod IP still
    stands in the endpoints. Loopback only."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(8):  # fill the accept queue (its size is the backlog + 1 on Linux)
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            if filler.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
                break
        time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
