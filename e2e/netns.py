"""The network namespace the cluster lives in, and how a process gets into it.

Everything of the cluster listens inside one network namespace where the whole pod CIDR
is a local route, so every pod IP is bindable there and nothing is reachable from
outside it. A process joins with ``setns(2)`` (see ``enter``), which moves only the
calling thread: call it before any thread is started, so that every later thread and
child process inherits the namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


def path(name: str) -> Path:
    return NETNS_DIR / name


def exists(name: str) -> bool:
    return path(name).exists()


def create(name: str, local_cidrs: list[str]) -> None:
    """Create the namespace with lo up and each CIDR routed locally (bindable) on lo."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    for cidr in local_cidrs:
        subprocess.run(["ip", "-n", name, "route", "add", "local", cidr, "dev", "lo"], check=True)


def delete(name: str) -> None:
    if exists(name):
        subprocess.run(["ip", "netns", "del", name], check=True)


def pids(name: str) -> list[int]:
    """Every process whose network namespace is this one (ours by construction)."""
    if not exists(name):
        return []
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def inside(name: str) -> bool:
    """Whether the calling thread is already in the namespace."""
    try:
        mine, target = os.stat("/proc/thread-self/ns/net"), os.stat(path(name))
    except FileNotFoundError:
        return False
    return (mine.st_dev, mine.st_ino) == (target.st_dev, target.st_ino)


_original: int | None = None
"""An open handle on the namespace this process started in, kept by the first ``enter``."""


def _setns(fd: int, what: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


def enter(name: str) -> None:
    """Move the calling thread (and its future threads and children) into the namespace."""
    global _original
    if inside(name):
        return
    if _original is None:
        _original = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    fd = os.open(path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(fd, f"network namespace {name}")
    finally:
        os.close(fd)


def leave() -> None:
    """Move the calling thread back to where it was before ``enter``."""
    if _original is not None:
        _setns(_original, "the original network namespace")


@contextlib.contextmanager
def visiting(name: str) -> Iterator[None]:
    """The calling thread inside namespace `name` for the block, then back in the namespace
    it was in before — not the original one ``leave`` returns to: a test module's own cluster,
    visited from inside the session's cluster, must hand the session its namespace back."""
    before = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter(name)
        yield
    finally:
        _setns(before, "the namespace before the visit")
        os.close(before)
