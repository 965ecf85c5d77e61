"""The fastest engine we can write: fixed OpenAI answers from a bare asyncio protocol.

A router benchmark must measure the router, so the engine behind it has to cost
as little as possible per request: no framework, a minimal HTTP/1.1 reader
(Content-Length bodies, keep-alive), pre-rendered responses. A streamed answer is
written as separate events on successive loop turns, so the router really
relays several chunks. It also answers what peers' routers probe on a worker
(/health, /get_model_info, /get_server_info, /v1/models ...), reporting a
model path that is a local folder so no router goes looking for a hub.

Run it standalone: `python -m prefixroute.bench.router_cost.backend [--host H] PORT [PORT ...]`
(`--host`: the address to bind, e.g. a pod's IP when it runs as a pod of the local cluster).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable

MODEL = "bench-model"
STREAM_EVENTS = 8


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _completion(chat: bool) -> bytes:
    usage = {"prompt_tokens": 32, "completion_tokens": 16, "total_tokens": 48}
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok " * 16}, "finish_reason": "length"}
        obj = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [choice],
            "usage": usage,
        }
    else:
        choice = {"index": 0, "text": "ok " * 16, "finish_reason": "length", "logprobs": None}
        obj = {
            "id": "cmpl-bench",
            "object": "text_completion",
            "created": 1,
            "model": MODEL,
            "choices": [choice],
            "usage": usage,
        }
    return _response("200 OK", json.dumps(obj).encode())


def _events(chat: bool) -> list[bytes]:
    out = []
    for i in range(STREAM_EVENTS):
        if chat:
            obj = {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
            }
        else:
            obj = {
                "id": "cmpl-bench",
                "object": "text_completion",
                "created": 1,
                "model": MODEL,
                "choices": [{"index": 0, "text": f"t{i} ", "finish_reason": None}],
            }
        out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    # HTTP/1.1 chunked framing around each event
    return [f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in out] + [b"0\r\n\r\n"]


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
# The local model folder the benchmark wrote (see peers.py); a peer router loads its tokenizer from it.
_MODEL_PATH = os.environ.get("PREFIXROUTE_BENCH_MODEL_DIR", "bench-model")
_INFO = json.dumps(
    {
        "model_path": _MODEL_PATH,
        "tokenizer_path": _MODEL_PATH,
        "served_model_name": MODEL,
        "is_generation": True,
        "max_total_num_tokens": 1 << 20,
        "max_running_requests": 1024,
        "context_length": 8192,
        "page_size": 16,
        "dp_size": 1,
    }
).encode()
_FIXED = {
    (b"POST", b"/v1/completions"): _completion(False),
    (b"POST", b"/v1/chat/completions"): _completion(True),
    (b"GET", b"/v1/models"): _response(
        "200 OK",
        json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}).encode(),
    ),
    (b"GET", b"/get_model_info"): _response("200 OK", _INFO),
    (b"GET", b"/model_info"): _response("200 OK", _INFO),
    (b"GET", b"/get_server_info"): _response("200 OK", _INFO),
    (b"GET", b"/server_info"): _response("200 OK", _INFO),
    (b"GET", b"/get_load"): _response("200 OK", b'[{"dp_rank":0,"num_reqs":0,"num_waiting_reqs":0,"num_tokens":0}]'),
    (b"GET", b"/metrics"): _response(
        "200 OK",
        b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n",
        b"text/plain",
    ),
}
# An OTLP/HTTP collector's answer, so `router-bench --tracing` exports its spans somewhere real.
_FIXED[(b"POST", b"/v1/traces")] = _response("200 OK", b"", b"application/x-protobuf")
for _path in (b"/health", b"/health_generate", b"/ping", b"/readiness", b"/liveness"):
    _FIXED[(b"GET", _path)] = _response("200 OK", b"")
_STREAMS = {b"/v1/completions": _events(False), b"/v1/chat/completions": _events(True)}
_NOT_FOUND = _response("404 Not Found", b'{"error":"not found"}')


def _chunked(buffer: bytes, at: int) -> tuple[bytes, int] | None:
    """A chunked body starting at `at`: (the body, where the message ends), or None while
    it is not all in. Chunk extensions are ignored; trailers are skipped."""
    parts: list[bytes] = []
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(buffer[at:line_end].split(b";", 1)[0], 16)
        at = line_end + 2
        if size == 0:
            end = buffer.find(b"\r\n\r\n", at - 2)  # the blank line after any trailers
            return (b"".join(parts), end + 4) if end >= 0 else None
        if len(buffer) < at + size + 2:
            return None
        parts.append(buffer[at : at + size])
        at += size + 2


class FastEngine(asyncio.Protocol):
    __slots__ = ("buffer", "loop", "transport")

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while True:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = buffer[:head_end]
            line_end = head.find(b"\r\n")
            request_line = head[: line_end if line_end >= 0 else len(head)].split(b" ")
            lower = head.lower()
            if b"\r\ntransfer-encoding: chunked" in lower:
                # A gateway's ext_proc in FULL_DUPLEX_STREAMED mode always sends bodies chunked
                # (Envoy drops the Content-Length): read them as any engine does.
                taken = _chunked(buffer, head_end + 4)
                if taken is None:
                    break
                body, total = taken
            else:
                length = 0
                at = lower.find(b"\r\ncontent-length:")
                if at >= 0:
                    end = lower.find(b"\r\n", at + 2)
                    length = int(lower[at + 17 : end if end >= 0 else len(lower)])
                total = head_end + 4 + length
                if len(buffer) < total:
                    break
                body = buffer[head_end + 4 : total]
            buffer = buffer[total:]
            self._answer(request_line[0], request_line[1].split(b"?")[0] if len(request_line) > 1 else b"", body)
        self.buffer = buffer

    def _answer(self, method: bytes, path: bytes, body: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        if method == b"POST" and path in _STREAMS and (b'"stream":true' in body or b'"stream": true' in body):
            transport.write(_STREAM_HEAD)
            self._stream(_STREAMS[path], 0)
            return
        transport.write(_FIXED.get((method, path), _NOT_FOUND))

    def _stream(self, events: list[bytes], i: int) -> None:
        """One event per loop turn, so each leaves as its own segment like a real decode step."""
        if self.transport is None or i >= len(events):
            return
        self.transport.write(events[i])
        self.loop.call_soon(self._stream, events, i + 1)


async def serve(ports: list[int], host: str = "127.0.0.1", ready: Callable[[], None] | None = None) -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(FastEngine, host, port, backlog=4096, reuse_address=True) for port in ports]
    if ready is not None:
        ready()
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    host = "127.0.0.1"
    if argv[:1] == ["--host"] and len(argv) >= 2:
        host, argv = argv[1], argv[2:]
    ports = [int(p) for p in argv] or [18000]
    asyncio.run(serve(ports, host, ready=lambda: print("ready", flush=True)))


if __name__ == "__main__":
    main(sys.argv[1:])
