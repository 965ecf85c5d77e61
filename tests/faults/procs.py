"""Real processes for fault tests: engine-sim and router as `python -m prefixroute ...`.

Each process is a `prefixroute.processes.Child` started by this test session on a free port
of 127.0.0.1, with its output in a log file; it is signalled only through its own pid
(never by name), and every one is ended when its test ends. The module also reads what the
tests need from the outside, as an operator would: `/metrics` of the router and the engines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.samples import Sample

from prefixroute.bench import prom
from prefixroute.bench.local_fleet import engine_sim_command, router_command
from prefixroute.processes import Child, free_port

ENGINE_FLAGS = ("--max-running", "256", "--kv-blocks", "8192", "--max-model-len", "8192")


@dataclass
class Fleet:
    """The processes of one test."""

    tmp: Path
    procs: list[Child] = field(default_factory=list)

    def _started(self, kind: str, argv: list[str], port: int) -> Child:
        name = f"{kind}-{len([p for p in self.procs if p.name.startswith(kind)])}"
        proc = Child(name, argv, self.tmp / f"{name}.log", port)
        self.procs.append(proc)
        return proc.start()

    async def engines(self, count: int, *flags: str, model: str = "sim") -> list[Child]:
        out = []
        for _ in range(count):
            port = free_port()
            out.append(self._started("engine", engine_sim_command(port, "--model", model, *ENGINE_FLAGS, *flags), port))
        for proc in out:
            await proc.wait_http_async("/health")
        return out

    async def router(
        self, *flags: str, backends: Iterable[Child] = (), ring_file: Path | None = None, ready: bool = True
    ) -> Child:
        port = free_port()
        source = ["--ring-file", str(ring_file)] if ring_file else ["--backends", ",".join(p.url for p in backends)]
        proc = self._started("router", router_command(port, *source, "--log-level", "WARNING", *flags), port)
        await proc.wait_http_async("/ready" if ready else "/health")
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()


async def metrics(url: str) -> list[Sample]:
    """A server's /metrics, every sample (read with `prom.total` / `prom.by_label`)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/metrics") as r:
            return prom.samples(await r.text())


async def engine_running(url: str) -> float:
    """Requests an engine holds now (running or waiting), from its own /metrics."""
    m = await metrics(url)
    return prom.total(m, "vllm:num_requests_running") + prom.total(m, "vllm:num_requests_waiting")


def sse_events(body: bytes) -> list[Any]:
    """The data of every event of an SSE body, JSON-decoded ("[DONE]" kept as the string)."""
    events: list[Any] = []
    for block in body.split(b"\n\n"):
        if not block.strip():
            continue
        assert block.startswith(b"data: "), block[:80]
        data = block[len(b"data: ") :]
        events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return events
