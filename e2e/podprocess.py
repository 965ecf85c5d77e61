"""Stopping a container's process the way the kubelet does.

preStop first (sleep, exec or httpGet, within the grace period), then SIGTERM to the
process group, then SIGKILL once the grace period is over. Processes are session
leaders (e2e/sandbox.py), so the whole group goes: a server's workers too.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from e2e import podspec, probes
from e2e.podcontainer import Container

log = logging.getLogger("podrunner")


def stop(proc: subprocess.Popen[bytes], grace: float) -> bool:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL; False if it had already ended."""
    if proc.poll() is not None:
        return False
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=max(0.1, grace))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return True


def pre_stop(c: Container, deadline: float, pod_ip: str, where: str) -> None:
    """The container's preStop hook, given what is left of the grace period."""
    hook = (c.spec.get("lifecycle") or {}).get("preStop")
    if not hook or not c.running():
        return
    budget = max(0.0, deadline - time.monotonic())
    if "sleep" in hook:
        time.sleep(min(budget, float(hook["sleep"].get("seconds", 0))))
    elif "exec" in hook:
        try:
            subprocess.run(hook["exec"].get("command", []), env=c.env, timeout=budget, check=False, capture_output=True)
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("pod %s: preStop of %s: %s", where, c.name, e)
    elif "httpGet" in hook:
        p = podspec.Probe("httpGet", hook["httpGet"], 0, 0, budget, 1, 1)
        probes.run(p, c.spec, pod_ip, c.env)


def in_parallel(jobs: list[Callable[[], None]]) -> None:
    """Run each job in a thread of its own and wait for all: containers stop together."""
    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
