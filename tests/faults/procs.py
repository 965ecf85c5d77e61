"""Real processes for fault tests: engine-sim and router as `python -m prefixroute ...`.

Each process is started by this test session, on a free port of 127.0.0.1, with its output
in a log file; it is signalled only through its own Popen (never by name), and every one is
ended when its test ends. `Fleet` also reads what the tests need from the outside, as an
operator would: `/metrics` of the router and the engines, and the router's RSS from /proc.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.samples import Sample

from prefixroute.bench import prom


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    argv: list[str]
    port: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> Proc:
        """Start (or start again, same command and port)."""
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def signal(self, sig: int) -> None:
        assert self.popen is not None and self.popen.poll() is None, f"{self.name} is not running"
        self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node failure would, and wait for it."""
        self.signal(signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait(10)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        self.popen.terminate()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError(f"no VmRSS for {self.name}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


async def wait_http(proc: Proc, path: str = "/health", timeout: float = 60.0, status: int = 200) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            assert proc.popen is not None
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
            try:
                async with session.get(proc.url + path, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == status:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{proc.name} did not answer {path} with {status} in {timeout:.0f}s:\n{proc.tail()}"
                )
            await asyncio.sleep(0.1)


ENGINE_FLAGS = ("--max-running", "256", "--kv-blocks", "8192", "--max-model-len", "8192")


@dataclass
class Fleet:
    """The processes of one test."""

    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    def _proc(self, name: str, argv: list[str], port: int) -> Proc:
        proc = Proc(name, argv, port, self.tmp / f"{name}.log")
        self.procs.append(proc)
        return proc

    async def engines(self, count: int, *flags: str, model: str = "sim") -> list[Proc]:
        out = []
        for _i in range(count):
            port = free_port()
            argv = [
                sys.executable,
                "-m",
                "prefixroute",
                "engine-sim",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--model",
                model,
                *ENGINE_FLAGS,
                *flags,
            ]
            out.append(
                self._proc(f"engine-{len([p for p in self.procs if p.name.startswith('engine')])}", argv, port).start()
            )
        for proc in out:
            await wait_http(proc)
        return out

    async def router(
        self, *flags: str, backends: Iterable[Proc] = (), ring_file: Path | None = None, ready: bool = True
    ) -> Proc:
        port = free_port()
        source = ["--ring-file", str(ring_file)] if ring_file else ["--backends", ",".join(p.url for p in backends)]
        argv = [
            sys.executable,
            "-m",
            "prefixroute",
            "router",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *source,
            "--log-level",
            "WARNING",
            *flags,
        ]
        proc = self._proc(f"router-{len([p for p in self.procs if p.name.startswith('router')])}", argv, port).start()
        await wait_http(proc, "/ready" if ready else "/health")
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
