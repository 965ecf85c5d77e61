"""Python-level function calls per request in the router: a deterministic stand-in for its CPU.

router-bench's CPU per request moves with whatever else the machine runs (the ratio to
sglang-router has drifted by 0.2x between runs of the same code), so a change's effect on the
request path is hard to see there. A function call count is not: run the same requests
through the same code and cProfile counts the same calls. This drives `requests` plain and
`requests` streamed `/v1/completions` (router-bench's prompt shape: a 1.5 kB shared prefix, 64
questions) through our router in this process, approximate mode, the router's default flags
and upstream client, in front of router-bench's own engines (`backend.FastEngine`, two of them
as router-bench runs, in a process of their own).

The router runs on its own thread and event loop (uvloop when installed, as `prefixroute
router` runs) and only that thread is profiled (cProfile hooks one thread), so the client, on
another thread, is not counted. Connections are opened and warmed before the profile starts.
cProfile's times (tottime) include its own overhead, about a microsecond a call, and move with
the machine's load; the counts do not. Counts repeat to within a fraction of a call per request (the Date header is
rendered once a second, so a run crosses a second or not). The engines space a stream's events
`EVENT_GAP` apart, as decode steps are: router-bench's engine writes them on successive loop
turns, and how many then reach the router in one read depends on thread timing (433 to 534
calls per streamed request on the same code, as the machine's load moved).

Run: `python -m prefixroute.bench.router_cost.call_count [--requests N] [--top K]`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from prefixroute.bench.router_cost.backend import FastEngine

T = TypeVar("T")

EVENT_GAP = 0.001  # seconds between a stream's events: each reaches the router as a read of its own

_PREFIX = "You are a helpful assistant. Answer briefly and precisely. " * 25


def request_body(n: int, stream: bool) -> bytes:
    """router-bench's request n (load.py's Lua script writes the same bodies)."""
    i = n % 64 + 1
    return (
        f'{{"model":"bench-model","prompt":"{_PREFIX} Question {i}: what is {i} + {i * 7}?",'
        f'"max_tokens":16,"stream":{"true" if stream else "false"}}}'
    ).encode()


@dataclass(frozen=True)
class FunctionCost:
    """One function's share of the profiled requests, per request."""

    name: str
    calls: float
    tottime_us: float


@dataclass(frozen=True)
class CallCount:
    """What `requests` requests of one kind cost the router's thread, per request."""

    stream: bool
    requests: int
    calls: float  # every Python function and builtin call cProfile saw
    primitive_calls: float  # calls that were not recursive
    tottime_us: float  # the router thread's CPU time under the profiler: moves with the machine, unlike the counts
    by_calls: list[FunctionCost]
    by_tottime: list[FunctionCost]


class _LoopThread:
    """An event loop on a thread of its own; coroutines are handed to it and awaited from outside."""

    def __init__(self, name: str, fast: bool) -> None:
        self.loop = _new_loop(fast)
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def call(self, function: Callable[[], T]) -> T:
        """`function` on the loop's thread (cProfile's enable and disable act on the calling thread)."""
        done: Future[T] = Future()

        def call() -> None:
            done.set_result(function())

        self.loop.call_soon_threadsafe(call)
        return done.result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def _new_loop(fast: bool) -> asyncio.AbstractEventLoop:
    if fast:
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            pass
    return asyncio.new_event_loop()


class _Client:
    """One keep-alive HTTP/1.1 connection that sends a completion and reads its answer whole."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, path: str, body: bytes) -> bytes:
        head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(status_and_headers.split(b" ", 2)[1])
        lower = status_and_headers.lower()
        if b"transfer-encoding: chunked" in lower:
            data = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                data += chunk[:-2]
        else:
            at = lower.index(b"content-length:") + 15
            data = await self.reader.readexactly(int(lower[at : lower.index(b"\r\n", at)]))
        if status != 200:
            raise RuntimeError(f"the router answered {status}: {data[:300]!r}")
        return data


class _PacedEngine(FastEngine):
    """router-bench's engine, with its stream's events `EVENT_GAP` apart."""

    def _stream(self, events: list[bytes], i: int) -> None:
        if self.transport is None or i >= len(events):
            return
        self.transport.write(events[i])
        self.loop.call_later(EVENT_GAP, self._stream, events, i + 1)


async def _serve_engines(count: int) -> None:
    """`count` paced engines on free ports of 127.0.0.1; prints "ready URL ..." once they listen."""
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(_PacedEngine, "127.0.0.1", 0) for _ in range(count)]
    urls = [f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers]
    print("ready", *urls, flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def _engine_process(count: int) -> tuple[subprocess.Popen[str], list[str]]:
    """The engines in a process of their own: on a thread of this one they would contend with
    the router for the GIL, and the waits would land in the router's profiled times."""
    command = [sys.executable, "-m", "prefixroute.bench.router_cost.call_count", "--engines", str(count)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    ready = child.stdout.readline().split()
    if ready[:1] != ["ready"] or len(ready) != count + 1:
        child.kill()
        child.wait()
        raise RuntimeError(f"the engines did not start: {ready}")
    return child, ready[1:]


async def _connect(port: int) -> _Client:
    return _Client(*await asyncio.open_connection("127.0.0.1", port))


async def _send(client: _Client, first: int, count: int, stream: bool) -> None:
    for n in range(first, first + count):
        answer = await client.post("/v1/completions", request_body(n, stream))
        if stream and not answer.rstrip().endswith(b"data: [DONE]"):
            raise RuntimeError(f"a streamed answer ended early: {answer[-200:]!r}")


def measure(requests: int = 200, top: int = 25, warmup: int = 64, members: int = 2) -> list[CallCount]:
    """Plain then streamed: `warmup` unprofiled requests, then `requests` profiled, one at a time."""
    from prefixroute.router.app import build_app, start_router
    from prefixroute.router.settings import RouterSettings

    engines, urls = _engine_process(members)
    outside = _LoopThread("bench-client", fast=False)
    router_thread = _LoopThread("router", fast=True)
    try:
        # a scrape every hour: the profile holds the request path, not the scraper's turns
        settings = RouterSettings(backends=tuple(urls), scrape_interval=3600.0)
        serving = router_thread.run(start_router(build_app(settings)))
        client = outside.run(_connect(serving.port))
        out = []
        for stream in (False, True):
            outside.run(_send(client, 0, warmup, stream))
            profile = cProfile.Profile()
            router_thread.call(profile.enable)
            outside.run(_send(client, warmup, requests, stream))
            router_thread.call(profile.disable)
            out.append(_summary(profile, stream, requests, top))
        client.writer.close()
        router_thread.run(serving.close())
    finally:
        router_thread.stop()
        outside.stop()
        engines.kill()
        engines.wait()
    return out


def _summary(profile: cProfile.Profile, stream: bool, requests: int, top: int) -> CallCount:
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    # the enable/disable calls themselves ran on the profiled thread: not the request path's
    own = {k: v for k, v in stats.items() if "_lsprof.Profiler" not in k[2] and k[0] != __file__}
    rows = [FunctionCost(_name(k), v[1] / requests, 1e6 * v[2] / requests) for k, v in own.items()]
    return CallCount(
        stream=stream,
        requests=requests,
        calls=sum(v[1] for v in own.values()) / requests,
        primitive_calls=sum(v[0] for v in own.values()) / requests,
        tottime_us=1e6 * sum(v[2] for v in own.values()) / requests,
        by_calls=sorted(rows, key=lambda r: (-r.calls, r.name))[:top],
        by_tottime=sorted(rows, key=lambda r: (-r.tottime_us, r.name))[:top],
    )


def _name(key: tuple[str, int, str]) -> str:
    filename, line, function = key
    if filename == "~":
        return function  # a builtin: "<method 'get' of 'dict' objects>"
    at = filename.rfind("prefixroute/")
    return f"{filename[at:] if at >= 0 else filename.rsplit('/', 1)[-1]}:{line}({function})"


def report(counts: list[CallCount]) -> str:
    lines = []
    for count in counts:
        kind = "streamed" if count.stream else "plain"
        lines.append(
            f"{kind}: {count.calls:.1f} calls per request ({count.primitive_calls:.1f} primitive), "
            f"{count.tottime_us:.0f} µs profiled tottime per request, over {count.requests} requests"
        )
        lines.append(f"  top {len(count.by_calls)} by calls per request:")
        lines += [f"    {r.calls:7.2f}  {r.tottime_us:7.2f} µs  {r.name}" for r in count.by_calls]
        lines.append(f"  top {len(count.by_tottime)} by tottime per request:")
        lines += [f"    {r.tottime_us:7.2f} µs  {r.calls:7.2f}  {r.name}" for r in count.by_tottime]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=200, help="profiled requests of each kind")
    parser.add_argument("--top", type=int, default=25, help="functions listed by calls and by tottime")
    parser.add_argument("--engines", type=int, help=argparse.SUPPRESS)  # the engine process (`_engine_process`)
    args = parser.parse_args(argv)
    if args.engines:
        asyncio.run(_serve_engines(args.engines))
        return
    print(report(measure(args.requests, args.top)))


if __name__ == "__main__":
    main()
