"""CPU time of a router process group, read from /proc: what one request costs the router.

Requests per second on a shared machine move with whatever else runs on the router's core;
the CPU a router spends per request served barely does, and it is what one core's
capacity follows. Each target runs in its own session (the bench starts it with
`start_new_session`), so its process group holds the router and anything it started
(sglang-router's launcher and its Rust runtime alike).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_seconds(pgid: int, proc: Path = Path("/proc")) -> float | None:
    """User + system CPU seconds of the live processes in process group `pgid` (None without /proc)."""
    if not proc.is_dir():
        return None
    ticks = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:  # fields 5 (pgrp), 14 (utime), 15 (stime) of proc(5)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS
