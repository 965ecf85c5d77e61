"""Start daemons detached, remember them by PID, and stop exactly those later.

A PID alone can be reused by an unrelated process after ours exits, so each record also
holds the process start time from /proc; ``stop`` only signals a PID whose start time
still matches. Every daemon runs in its own session (and so its own process group), and
is stopped by signalling that group, which also reaches any children it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 2 (comm) may contain spaces and parentheses: split after its closing paren.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has exited; only its parent's wait is missing
    return int(fields[19])


@dataclass(frozen=True)
class Record:
    name: str
    pid: int
    start: int
    argv: list[str]
    log: str

    def alive(self) -> bool:
        return start_time(self.pid) == self.start


def spawn(
    name: str, argv: list[str], log: Path, pid_dir: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Record:
    """Start ``argv`` detached (new session, stdin from /dev/null, output to ``log``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_dir.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            argv,
            stdin=devnull,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    started = start_time(proc.pid)
    rec = Record(name, proc.pid, started if started is not None else -1, argv, str(log))
    (pid_dir / f"{name}.json").write_text(json.dumps(rec.__dict__))
    return rec


def load(pid_dir: Path) -> list[Record]:
    records = []
    for f in sorted(pid_dir.glob("*.json")) if pid_dir.is_dir() else []:
        try:
            records.append(Record(**json.loads(f.read_text())))
        except (ValueError, TypeError):
            continue
    return records


def _signal_group(rec: Record, sig: int) -> None:
    if not rec.alive():
        return
    try:
        os.killpg(rec.pid, sig)  # its own session: the group id is its pid
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(rec.pid, sig)


def stop(rec: Record, grace: float = 10.0) -> bool:
    """SIGTERM the record's process group, SIGKILL after ``grace`` seconds. True if it ran."""
    if not rec.alive():
        return False
    _signal_group(rec, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while rec.alive() and time.monotonic() < deadline:
        _reap(rec.pid)
        time.sleep(0.1)
    if rec.alive():
        _signal_group(rec, signal.SIGKILL)
        while rec.alive():
            _reap(rec.pid)
            time.sleep(0.05)
    _reap(rec.pid)
    return True


def _reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
