"""What a cold build is doing and about how long it has left, as one line every few seconds.

A cold build of the control plane takes minutes on two cores and is silent while Go compiles.
Each ``go`` command runs with ``-v``, which names every package as it is compiled; counting
them against the packages the same component compiled last time (or a figure measured on the
project's 2-core machine) says how far it is, and the pace so far says how long the rest will
take, on whatever load the machine has now. The estimate is pure (``seconds_left``), the
reading of Go's output and the printing are at the edge.

Only the standard library: ``e2e.build`` runs before any virtualenv exists.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EVERY = 20.0
"""Seconds between two progress lines."""

_PACKAGE = re.compile(r"^[\w.~+-]+(/[\w.~+-]+)*$")
"""A line of ``go build -v`` that names a package (an import path: no spaces, no colons)."""


@dataclass(frozen=True)
class Expected:
    """How long one component's cold build takes and how many packages it compiles."""

    seconds: float
    packages: int


@dataclass
class Job:
    """One component's build: the folder it fills, its timings, what Go has compiled so far."""

    name: str
    out: Path
    expected: Expected
    timings: dict[str, float] = field(default_factory=dict)
    packages: int = 0
    downloads: int = 0
    cpu_seconds: float = 0.0
    started: float | None = None
    finished: float | None = None

    def go(self, args: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        """Run ``go ARGS`` with ``-v``, counting packages and downloads, adding its CPU time
        (the compilers' and linkers' too); print anything else (errors above all) as it
        comes, and raise with the last lines when it fails."""
        cmd = ["go", args[0], "-v", *args[1:]]
        print("  $", " ".join(cmd), flush=True)
        tail: deque[str] = deque(maxlen=40)
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        try:
            for text in proc.stdout:
                text = text.rstrip("\n")
                if text.startswith("go: downloading "):
                    self.downloads += 1
                elif _PACKAGE.match(text):
                    self.packages += 1
                else:
                    tail.append(text)
                    print(f"  {self.name}: {text}", flush=True)
        except BaseException:
            proc.kill()
            raise
        finally:
            proc.stdout.close()
            # wait4, not wait: its resource usage holds every compile and link go waited for.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_seconds += usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd, output="\n".join(tail))


def seconds_left(jobs: Sequence[Job], now: float, parallel: int) -> float:
    """About how long until every job in ``jobs`` is built, ``parallel`` at a time.

    A running job that is at least a tenth through its expected packages has left what its pace
    so far says; one just started, or one still waiting, has left its expected time, scaled by
    how much slower (or faster) than expected the running jobs go now. The jobs share the
    slots: the whole is at least the longest job and at least the total shared out.
    """
    pending = [job for job in jobs if job.finished is None]
    paced: dict[int, float] = {}  # index in pending -> the whole time its pace so far says
    for i, job in enumerate(pending):
        if job.started is not None:
            done = min(0.99, job.packages / max(1, job.expected.packages))
            if done >= 0.1:
                paced[i] = (now - job.started) / done
    ratios = [paced[i] / max(1.0, pending[i].expected.seconds) for i in paced]
    pace = sum(ratios) / len(ratios) if ratios else 1.0
    each = []
    for i, job in enumerate(pending):
        elapsed = 0.0 if job.started is None else now - job.started
        each.append(max(0.0, paced.get(i, job.expected.seconds * pace) - elapsed))
    if not each:
        return 0.0
    return max(max(each), sum(each) / max(1, parallel))


def describe(seconds: float) -> str:
    """``about 4 min`` / ``about 40 s``: an estimate, said as one."""
    if seconds >= 90:
        return f"about {round(seconds / 60)} min"
    return f"about {max(5, round(seconds / 5) * 5):.0f} s"


def line(jobs: Sequence[Job], now: float, parallel: int, started: float) -> str:
    """One progress line: elapsed, each running job's packages, who waits, the time left."""
    running = []
    for job in jobs:
        if job.started is None or job.finished is not None:
            continue
        if job.packages:
            running.append(f"{job.name} {job.packages}/~{job.expected.packages} packages")
        elif job.downloads:
            running.append(f"{job.name} downloading modules ({job.downloads})")
        else:
            running.append(f"{job.name} starting")
    waiting = [job.name for job in jobs if job.started is None]
    minutes, secs = divmod(int(now - started), 60)
    parts = [f"build {minutes}m{secs:02d}s: " + (", ".join(running) or "finishing")]
    if waiting:
        parts.append("next " + ", ".join(waiting))
    parts.append(describe(seconds_left(jobs, now, parallel)) + " left")
    return "; ".join(parts)


class Reporter:
    """Prints ``line`` every ``every`` seconds on a thread of its own, until stopped."""

    def __init__(
        self,
        jobs: Sequence[Job],
        parallel: int,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs, self.parallel, self.every, self.clock = jobs, parallel, every, clock
        self.started = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="build-progress", daemon=True)

    def __enter__(self) -> Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(line(self.jobs, self.clock(), self.parallel, self.started), flush=True)
