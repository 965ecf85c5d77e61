"""Local processes for live runs: an engine-sim fleet and one router at a time.

Each process writes its output to a log file (under the run folder) rather
than to the terminal, is waited on until it answers HTTP, and is ended — by
its own process id only — when the run is over.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prefixroute.bench.errors import TargetError


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


def start(name: str, command: Sequence[str], log_dir: Path) -> Process:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name.replace('/', '_')}.log"
    handle = open(log, "wb")
    popen = subprocess.Popen(list(command), stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    handle.close()
    return Process(name, popen, log)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_http(process: Process, url: str, timeout_s: float = 90.0, body: bytes | None = None) -> None:
    """Wait until `url` answers 200 (GET, or POST of `body`), or fail naming the log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise TargetError(
                f"{process.name} exited with {process.popen.returncode}; see {process.log}:\n{_tail(process.log)}"
            )
        try:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as resp:
                if resp.status == 200:
                    resp.read()
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise TargetError(f"{process.name} did not answer {url} within {timeout_s:.0f}s; see {process.log}")


def engine_command(port: int, model: str, model_path: str, time_scale: float, engine_flags: Sequence[str]) -> list[str]:
    return [
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
        "--model-path",
        model_path,
        "--time-scale",
        str(time_scale),
        *engine_flags,
    ]


def start_engines(
    count: int,
    base_port: int,
    model: str,
    model_path: str,
    time_scale: float,
    engine_flags: Sequence[str],
    log_dir: Path,
) -> tuple[list[str], list[Process]]:
    urls, procs = [], []
    try:
        for i in range(count):
            port = base_port + i
            procs.append(
                start(f"engine-{i}", engine_command(port, model, model_path, time_scale, engine_flags), log_dir)
            )
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls):
            wait_http(proc, url + "/health")
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return urls, procs
