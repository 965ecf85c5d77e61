"""The load generator: wrk (C, one thread) driven by a Lua script, so the client is never the bottleneck.

Two kinds of run:
- closed loop (`connections` busy connections, no pause): the most requests per
  second the target sustains;
- paced (`connections` connections, each pausing so that together they offer
  about `rate` requests per second): latency at a fixed, moderate load, which is
  what "added latency at 500 req/s" means. wrk's `delay()` hook makes each
  connection wait a random time (uniform, mean connections / rate) before its
  next request, so many connections together approximate independent arrivals
  rather than synchronised bursts; the achieved rate is reported.

Request bodies are completions whose prompts share a long system prefix and
differ in the question (64 variants), so the router canonicalises and hashes a
realistic ~1.5 kB prompt and its prefix index sees real sharing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from prefixroute import debian_packages

_SCRIPT = r"""
local stream = os.getenv("BENCH_STREAM") == "1"
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local prefix = string.rep("You are a helpful assistant. Answer briefly and precisely. ", 25)
local bodies = {}
for i = 1, 64 do
  bodies[i] = string.format(
    '{"model":"bench-model","prompt":"%s Question %d: what is %d + %d?","max_tokens":16,"stream":%s}',
    prefix, i, i, i * 7, stream and "true" or "false")
end
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[(n % 64) + 1])
end
if delay_ms > 0 then
  -- uniform in [0, 2 x mean]: connections drift apart instead of firing in lockstep,
  -- so arrivals look like independent users rather than periodic bursts
  math.randomseed(os.time())
  delay = function() return math.random(0, 2 * delay_ms) end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d mean_us=%.1f socket_errors=%d status_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""

_RESULT = re.compile(r"BENCH (.*)")


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    errors: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def wrk_path() -> str:
    """wrk, apt-installed the first time where this runs as root on Debian (the machine's own
    package, as the cluster's Prometheus is); elsewhere the command to run is said."""
    path = shutil.which("wrk")
    if path is None and debian_packages.can_install():
        command = " ".join(debian_packages.install_command(["wrk"]))
        print(f"router-bench: installing wrk ({command}) ...", file=sys.stderr, flush=True)
        debian_packages.install(["wrk"])
        path = shutil.which("wrk")
    if path is None:
        raise SystemExit("router-bench needs wrk: apt-get install -y wrk")
    return path


def write_script(folder: Path) -> Path:
    path = folder / "bench.lua"
    path.write_text(_SCRIPT)
    return path


def run_wrk(
    url: str,
    script: Path,
    *,
    seconds: float,
    connections: int,
    stream: bool,
    rate: float | None = None,
    cpu: str | None = None,
) -> LoadResult:
    """One wrk run against `url`; paced to about `rate` req/s when given."""
    delay_ms = 0
    if rate:
        # each connection: one request, then a pause; together about `rate` per second
        delay_ms = max(1, round(1000.0 * connections / rate))
    env = dict(os.environ, BENCH_STREAM="1" if stream else "0", BENCH_DELAY_MS=str(delay_ms))
    command = [
        wrk_path(),
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    if cpu is not None and shutil.which("taskset"):
        command = ["taskset", "-c", cpu, *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 60, check=False)
    match = _RESULT.search(out.stdout)
    if match is None:
        raise RuntimeError(f"wrk gave no result: {out.stdout[-500:]} {out.stderr[-500:]}")
    fields = dict(item.split("=") for item in match.group(1).split())
    return LoadResult(
        requests=int(fields["requests"]),
        seconds=int(fields["duration_us"]) / 1e6,
        p50_ms=int(fields["p50_us"]) / 1000.0,
        p99_ms=int(fields["p99_us"]) / 1000.0,
        mean_ms=float(fields["mean_us"]) / 1000.0,
        errors=int(fields["socket_errors"]) + int(fields["status_errors"]),
    )
