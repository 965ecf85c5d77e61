"""Local child processes, started, watched and ended one way: the benches' engines and
routers, the e2e control plane's daemons, the fault and security tests' servers.

Every child runs in a session of its own (so its own process group), reads nothing (stdin
is /dev/null) and appends all it prints to a log file, after a header line naming each
start; an error about it quotes the log's tail. It is signalled through its own process id
only — never by name — and stopping signals its whole group, so children it started go
too: SIGCONT (a frozen process cannot act on SIGTERM), SIGTERM, and SIGKILL once a grace
period has passed.

A process id can be reused once its process is reaped. A child held by the Python process
that started it is safe (it is not reaped before we look). One that outlives it — the e2e
daemons, stopped by a later command — is remembered with its kernel start time as well,
and `stop_pid` signals it only while that still matches.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class ProcessError(RuntimeError):
    """A child exited, or did not get ready in time; the message names it and quotes its log."""


class Watched(Protocol):
    """What a wait needs of a process to stop early when it dies."""

    name: str

    def alive(self) -> bool: ...

    def tail(self, lines: int = 25) -> str: ...


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None once it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] == "Z":
        return None  # a zombie has exited; only its parent's wait is missing
    return int(fields[19])


@dataclass(frozen=True)
class Usage:
    rss_kib: int
    cpu_seconds: float  # user + system


def usage(pid: int) -> Usage:
    """Resident memory and CPU time so far of a running process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return Usage(rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(log: Path, lines: int = 25) -> str:
    """The last lines of a log ("" when there is none)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    process: Watched | None = None,
    detail: Callable[[], str] | None = None,
    interval: float = 0.1,
) -> None:
    """Until `check()` holds; ProcessError after `timeout` seconds (with `detail()`, say the
    last answer, and `process`'s log), or as soon as `process` dies."""
    deadline = time.monotonic() + timeout
    while not check():
        if process is not None and not process.alive():
            raise ProcessError(f"{process.name} exited while waiting for {what}:\n{process.tail()}")
        if time.monotonic() > deadline:
            last = f": {detail()}" if detail is not None else ""
            log = f"\n{process.name}'s log ends:\n{process.tail()}" if process is not None else ""
            raise ProcessError(f"timed out after {timeout:.0f}s waiting for {what}{last}{log}")
        time.sleep(interval)


def answers(url: str, body: bytes | None = None, status: int = 200, timeout: float = 2.0) -> bool:
    """Whether GET `url` (or POST of a JSON `body`) answers `status` now."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
            return bool(resp.status == status)
    except urllib.error.HTTPError as exc:
        return exc.code == status
    except OSError:  # refused, reset, timed out: not serving yet
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # a session leader: its group id is its pid
    except ProcessLookupError:
        pass
    except PermissionError:  # the leader changed its user (setpriv): reach it alone
        os.kill(pid, sig)


def _end(pid: int, alive: Callable[[], bool], grace: float) -> None:
    """SIGCONT and SIGTERM to the group, SIGKILL after `grace` seconds; until `alive()` fails."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        _signal_group(pid, sig)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive():
        _signal_group(pid, signal.SIGKILL)
        while alive():
            time.sleep(0.05)


def stop_pid(pid: int, started: int, grace: float = 10.0) -> bool:
    """End a process known by pid and start time (not necessarily our child); True if it ran."""

    def alive() -> bool:
        try:
            os.waitpid(pid, os.WNOHANG)  # our own child: collect it, so it leaves no zombie
        except ChildProcessError:
            pass
        return start_time(pid) == started

    if not alive():
        return False
    _end(pid, alive, grace)
    return True


@dataclass
class Child:
    """One local process: `start` it (again, with the same command, after a stop), wait until
    it serves, signal it, `stop` it. `port` is where it listens on 127.0.0.1, if anywhere."""

    name: str
    argv: list[str]
    log: Path
    port: int | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    preexec: Callable[[], None] | None = None  # runs in the child before exec (CPU pinning, limits)
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started: int = -1  # the kernel's start time of the current process
    starts: int = 0

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise ProcessError(f"{self.name} was never started")
        return self.popen.pid

    @property
    def url(self) -> str:
        if self.port is None:
            raise ProcessError(f"{self.name} listens on no port")
        return f"http://127.0.0.1:{self.port}"

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 25) -> str:
        return tail(self.log, lines)

    def start(self) -> Child:
        if self.alive():
            raise ProcessError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}: {shlex.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=None if self.env is None else dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
                close_fds=True,
                preexec_fn=self.preexec,
            )
        self.started = start_time(self.popen.pid) or -1
        return self

    def signal(self, sig: int) -> None:
        """Send `sig` to the child's process group (SIGSTOP to freeze it, SIGCONT to thaw it)."""
        if not self.alive():
            raise ProcessError(f"{self.name} is not running")
        _signal_group(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node failure would, and wait for it."""
        self.signal(signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait(10)

    def stop(self, grace: float = 10.0) -> bool:
        """End it gently if it runs (see the module docstring); True if it ran."""
        if not self.alive():
            return False
        _end(self.pid, self.alive, grace)
        return True

    def wait_http(
        self, url: str = "/health", body: bytes | None = None, status: int = 200, timeout: float = 60.0
    ) -> None:
        """Until GET `url` (or POST of `body`) answers `status`; a path is on this child's port.
        ProcessError, quoting the log, if it exits first or `timeout` seconds pass."""
        full = url if "://" in url else self.url + url
        wait_until(f"{full} to answer {status}", lambda: answers(full, body, status), timeout, self)

    async def wait_http_async(
        self, url: str = "/health", body: bytes | None = None, status: int = 200, timeout: float = 60.0
    ) -> None:
        """`wait_http` for async callers: it waits in a thread, so the event loop runs on."""
        await asyncio.to_thread(self.wait_http, url, body, status, timeout)
