"""CPU per process group from /proc: a real busy child, and stat lines with awkward names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prefixroute.bench.router_cost.cpu import group_cpu_seconds

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def test_counts_the_cpu_of_every_process_in_the_group() -> None:
    # a parent that starts a busy child in its own session: both count, nobody else does
    burn = "import time\nx = 0\nfor i in range(3_000_000): x += i\nprint('done', flush=True)\ntime.sleep(30)"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "done"
        spent = group_cpu_seconds(parent.pid)
        assert spent is not None
        assert spent > 0  # three million additions are not free
        assert group_cpu_seconds(parent.pid) >= spent  # a running total, never going back
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_no_such_group_costs_nothing() -> None:
    assert group_cpu_seconds(2**22 + 12345) == 0.0


def test_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    def stat(pid: int, name: str, pgrp: int, utime: int, stime: int) -> None:
        (tmp_path / str(pid)).mkdir()
        fields = ["S", "1", str(pgrp), "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime), "0", "0"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")

    stat(10, "sglang::router", 10, 300, 100)
    stat(11, "odd ) (name 7", 10, 50, 50)
    stat(12, "other", 99, 1000, 1000)
    (tmp_path / "self").mkdir()  # not a pid: skipped
    assert group_cpu_seconds(10, tmp_path) == pytest.approx(500 / os.sysconf("SC_CLK_TCK"))
    assert group_cpu_seconds(10, tmp_path / "missing") is None
