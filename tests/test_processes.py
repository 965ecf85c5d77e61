"""The one helper for local child processes: real children (python -c ...), started with a
log, waited on over HTTP, signalled, restarted, stopped with their whole group, and — for
daemons another process started — stopped by pid and start time only while those match."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefixroute import processes
from prefixroute.processes import Child, ProcessError

SERVE = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def do_POST(self):
        n = int(self.headers["Content-Length"]); body = self.rfile.read(n)
        self.send_response(200 if body == b"ping" else 400); self.end_headers()
    def log_message(self, *a): pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def server(tmp_path: Path, name: str = "srv") -> Child:
    port = processes.free_port()
    return Child(name, [sys.executable, "-c", SERVE, str(port)], tmp_path / f"{name}.log", port)


def test_serves_waits_restarts_and_logs_each_start(tmp_path: Path) -> None:
    child = server(tmp_path).start()
    try:
        child.wait_http("/health", timeout=30)
        child.wait_http("/other", status=404, timeout=5)
        child.wait_http("/", body=b"ping", timeout=5)  # POST
        assert child.alive()
        assert child.started == processes.start_time(child.pid)
        with pytest.raises(ProcessError, match="already running"):
            child.start()
        assert child.stop()
        assert not child.alive()
        assert not child.stop()
        child.start().wait_http(timeout=30)  # the same command, the same port
    finally:
        child.stop()
    log = child.log.read_text()
    assert log.count("--- start ") == 2
    assert "--- start 2: " in log
    assert log.splitlines().count("serving") == 2


def test_a_child_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    child = Child("dies", [sys.executable, "-c", "print('bad config'); raise SystemExit(3)"], tmp_path / "d.log", 1)
    child.start()
    with pytest.raises(ProcessError, match="dies exited") as err:
        child.wait_http(timeout=30)
    assert "bad config" in str(err.value)
    assert child.returncode == 3


def test_a_silent_child_times_out_naming_what_it_waited_for(tmp_path: Path) -> None:
    child = Child("mute", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "m.log", 9).start()
    try:
        with pytest.raises(ProcessError, match=r"timed out after 1s waiting for http://127\.0\.0\.1:9/health"):
            child.wait_http(timeout=1)
    finally:
        child.stop()


def test_stop_ends_the_whole_group_even_when_frozen_or_deaf(tmp_path: Path) -> None:
    """A child that ignores SIGTERM gets SIGKILL after the grace; its own child goes too."""
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = Child("deaf", [sys.executable, "-c", code], tmp_path / "deaf.log").start()
    processes.wait_until("the grandchild's pid", lambda: child.log.read_text().splitlines()[-1].isdigit(), 30, child)
    grandchild = int(child.log.read_text().splitlines()[-1])
    child.signal(signal.SIGSTOP)
    assert child.stop(grace=0.5)
    assert child.returncode == -signal.SIGKILL
    processes.wait_until("the grandchild to go", lambda: processes.start_time(grandchild) is None, 10)


def test_stop_pid_signals_only_the_process_it_recorded(tmp_path: Path) -> None:
    popen = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    started = processes.start_time(popen.pid)
    assert started is not None
    assert not processes.stop_pid(popen.pid, started + 1)  # another process's start time: left alone
    assert popen.poll() is None
    assert processes.stop_pid(popen.pid, started, grace=5)
    assert processes.start_time(popen.pid) is None
    assert not processes.stop_pid(popen.pid, started)


def test_usage_reads_memory_and_cpu_of_a_running_process() -> None:
    now = processes.usage(os.getpid())
    assert now.rss_kib > 0
    assert now.cpu_seconds > 0


def test_wait_until_adds_the_last_answer_to_a_timeout() -> None:
    began = time.monotonic()
    with pytest.raises(ProcessError, match="waiting for the moon: still new"):
        processes.wait_until("the moon", lambda: False, 0.2, detail=lambda: "still new", interval=0.05)
    assert time.monotonic() - began < 30
