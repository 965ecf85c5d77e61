"""Starting and stopping a container's process, as a container runtime and the kubelet do.

Start: the command line (the pod's command and args, else the image's ENTRYPOINT and CMD,
``$(VAR)`` expanded), a home of its own, the image's adaptation where it has one
(e2e/images.py), a header in the container's log, then e2e/sandbox.py with the mounts and
an empty file of its own at its terminationMessagePath, read back when it ends (the
termination message in its terminated state).
Stop: preStop first (sleep, exec or httpGet, within the grace period), then SIGTERM to
the process group, then SIGKILL once the grace period is over. Processes are session
leaders, so the whole group goes: a server's workers too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import podenv, podlogs, podspec, probes, sandbox
from e2e.images import Image
from e2e.launch import Launch
from e2e.podcontainer import Container, now_iso

log = logging.getLogger("podrunner")


TMP = "/tmp"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"  # the API's default terminationMessagePath
TERMINATION_MESSAGE_BYTES = 4096  # the kubelet's limit on a termination message
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048  # FallbackToLogsOnError: the kubelet's tail of the log


@dataclass(frozen=True)
class Where:
    """One pod's places: its state directory (homes, sandboxes, hosts, passwd), its log
    directory, its IP."""

    pod_dir: Path
    log_dir: Path
    pod_ip: str


def start(
    spec: Mapping[str, Any],
    env: dict[str, str],
    image: Image,
    where: Where,
    volume_mounts: list[sandbox.Mount],
    *,
    user: tuple[int, int] | None,
    switch_user: bool,
    created_top_dirs: set[str],
    cpu: Callable[[], int],
    default_cmd: bool,
) -> tuple[subprocess.Popen[bytes], list[str]]:
    """Start one container's process; returns it and the command line it runs."""
    if image.missing:
        raise OSError(image.missing)
    entry = list(image.entrypoint)
    if default_cmd and not spec.get("command") and not spec.get("args"):
        entry += list(image.cmd)  # the image's CMD
    argv = podspec.command_line(spec, env, entry)
    name = spec["name"]
    home = where.pod_dir / "home" / name
    home.mkdir(parents=True, exist_ok=True)
    if user and switch_user:
        os.chown(home, *user)
    workdir = Path(spec.get("workingDir") or podenv.CONTAINER_HOME)
    scratch = where.pod_dir / "sandbox" / name
    scratch.mkdir(parents=True, exist_ok=True)
    extra: list[sandbox.Mount] = []
    if image.private_tmp and not any(m.get("mountPath") == TMP for m in spec.get("volumeMounts", [])):
        private = where.pod_dir / "tmp" / name
        shutil.rmtree(private, ignore_errors=True)  # a fresh /tmp for each start, as a new container's
        private.mkdir(parents=True)
        private.chmod(0o1777)
        extra.append(sandbox.Mount(private, TMP))
    notes: list[str] = []
    if image.adapt is not None:
        adapted = image.adapt(Launch(argv, env, where.pod_ip, TMP, cpu() if image.wants_cpu else 0))
        argv, env, notes = adapted.argv, adapted.env, adapted.notes
    with (where.log_dir / f"{name}.log").open("ab") as out:
        out.write(f"--- {now_iso()} podrunner: start {name}: {json.dumps(argv)}\n".encode())
        for note in notes:
            out.write(f"--- podrunner: {image.repository} here: {note}\n".encode())
        out.flush()
        mounts = [
            sandbox.Mount(home, podenv.CONTAINER_HOME),
            sandbox.Mount(where.pod_dir / "passwd", "/etc/passwd", True),
            sandbox.Mount(where.pod_dir / "group", "/etc/group", True),
            *extra,
            *volume_mounts,
            _termination_mount(spec, where, user if switch_user else None),
        ]
        proc = sandbox.start(
            argv,
            env,
            mounts,
            where.pod_dir / "hosts",
            workdir,
            scratch,
            out,
            created_top_dirs,
            user if switch_user else None,
            keep=[*sandbox.runner_paths(), *image.keep],
        )
    return proc, argv


def _termination_file(spec: Mapping[str, Any], where: Where) -> Path:
    return where.pod_dir / "termination" / str(spec["name"])


def _termination_mount(spec: Mapping[str, Any], where: Where, user: tuple[int, int] | None) -> sandbox.Mount:
    """An empty file of the container's own, writable by its user, at its terminationMessagePath."""
    file = _termination_file(spec, where)
    file.parent.mkdir(exist_ok=True)
    file.write_bytes(b"")
    if user:
        os.chown(file, *user)
    target = str(spec.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH)
    if target.startswith("/dev/") and not os.path.lexists(target):
        # The sandbox would lay an overlay over /dev for the missing mount point, hiding
        # /dev/shm and /dev/pts from the process. An empty file in the machine's /dev (a
        # tmpfs, gone at reboot) is the mount point each container's own file is bound over.
        Path(target).touch()
    return sandbox.Mount(file, target)


def termination_message(spec: Mapping[str, Any], where: Where, exit_code: int) -> str:
    """What the container wrote to its terminationMessagePath (at most 4 KiB); for
    FallbackToLogsOnError, the end of its log when it failed and wrote nothing."""
    try:
        with _termination_file(spec, where).open("rb") as f:
            message = f.read(TERMINATION_MESSAGE_BYTES)
    except FileNotFoundError:
        message = b""
    if not message and exit_code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        log_file = where.log_dir / f"{spec['name']}.log"
        query = podlogs.LogQuery(tail_lines=FALLBACK_LINES)
        try:
            message = podlogs.select(log_file.read_bytes(), query)[-FALLBACK_BYTES:]
        except (FileNotFoundError, podlogs.LogQueryError):
            message = b""
    return message.decode("utf-8", errors="replace")


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
