"""The control plane's daemons, remembered on disk so a later command can stop them.

``up`` and ``down`` are separate commands, so each daemon's pid, kernel start time, command
line and log go to ``<pid_dir>/<name>.json`` when it starts. Starting and stopping are
`prefixroute.processes`' (its own session, output to the log, SIGTERM then SIGKILL to its
group); the start time is what keeps a later ``down`` from signalling a reused pid.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from prefixroute import processes


@dataclass(frozen=True)
class Record:
    name: str
    pid: int
    start: int
    argv: list[str]
    log: str

    def alive(self) -> bool:
        return processes.start_time(self.pid) == self.start

    def tail(self, lines: int = 25) -> str:
        return processes.tail(Path(self.log), lines)


def spawn(
    name: str, argv: list[str], log: Path, pid_dir: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Record:
    """Start ``argv`` detached and record it in ``pid_dir``."""
    pid_dir.mkdir(parents=True, exist_ok=True)
    child = processes.Child(name, argv, log, env=env, cwd=cwd).start()
    rec = Record(name, child.pid, child.started, argv, str(log))
    (pid_dir / f"{name}.json").write_text(json.dumps(asdict(rec)))
    return rec


def load(pid_dir: Path) -> list[Record]:
    records = []
    for f in sorted(pid_dir.glob("*.json")) if pid_dir.is_dir() else []:
        try:
            records.append(Record(**json.loads(f.read_text())))
        except (ValueError, TypeError):
            continue
    return records


def stop(rec: Record, grace: float = 10.0) -> bool:
    """End the recorded daemon and its group if it still runs; True if it ran."""
    return processes.stop_pid(rec.pid, rec.start, grace)
