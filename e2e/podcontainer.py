"""One container as the kubelet tracks it, and what happens to it when its process ends.

The pod worker (e2e/podworker.py) owns a ``Container`` per container of ours; this module
holds its state and the pure transitions of that state: what an exit means under the
pod's restartPolicy (restart after a back-off, or terminated for good), and how a probe
schedule starts over with each start.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from e2e import podspec

PROBE_KINDS = ("startupProbe", "readinessProbe", "livenessProbe")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    """One of our containers and its process, as the kubelet tracks it."""

    spec: Mapping[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    started_mono: float = 0.0
    restarts: int = 0
    backoff_n: int = 0
    ready: bool = False
    started: bool = False  # startup probe passed (or none)
    last_terminated: dict[str, Any] | None = None
    terminated: dict[str, Any] | None = None  # current state when not restarting
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    restart_at: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    probe_next: dict[str, float] = field(default_factory=dict)
    probe_ok: dict[str, int] = field(default_factory=dict)
    probe_fail: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def on_started(self, proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
        """A new process runs: not ready, not started until a startup probe says so, probes
        scheduled from now plus their initial delays."""
        self.proc, self.env = proc, env
        self.started_at, self.started_mono = now_iso(), time.monotonic()
        self.terminated, self.restart_at, self.waiting_reason, self.waiting_message = None, 0.0, "", ""
        self.ready = False
        self.started = podspec.probe(self.spec, "startupProbe") is None
        self.probe_ok, self.probe_fail = {}, {}
        self.probe_next = {}
        for kind in PROBE_KINDS:
            p = podspec.probe(self.spec, kind)
            if p is not None:
                self.probe_next[kind] = self.started_mono + p.initial_delay

    def on_start_failed(self, reason: str, message: str, now: float) -> None:
        self.proc = None
        self.waiting_reason, self.waiting_message = reason, message
        self.restart_at = now + 2.0

    def exit_code(self) -> int:
        """The ended process's exit status as a container runtime reports it."""
        assert self.proc is not None
        code = self.proc.returncode if self.proc.returncode is not None else -9
        return 128 - code if code < 0 else code  # killed by signal N: 128+N

    def on_exited(self, policy: str, now: float, backoff_base: float, backoff_cap: float, message: str = "") -> int:
        """The process has ended: record it (with its termination message), and either
        schedule a restart with the kubelet's doubling back-off or mark the container
        terminated. Returns the exit code."""
        code = self.exit_code()
        state: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": now_iso(),
        }
        if message:
            state["message"] = message
        self.proc, self.ready, self.started = None, False, False
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            if now - self.started_mono > 600:
                self.backoff_n = 0  # ran ten minutes: forget earlier crashes, as the kubelet does
            self.last_terminated = state
            delay = min(backoff_cap, backoff_base * 2 ** min(self.backoff_n, 10))
            self.backoff_n += 1
            self.restarts += 1
            self.restart_at = now + delay
            self.waiting_reason, self.waiting_message = (
                "CrashLoopBackOff",
                f"back-off {delay:.0f}s restarting {self.name}",
            )
        else:
            self.terminated = state
            self.restart_at = 0.0
        return code
