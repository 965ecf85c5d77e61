"""Start a container's process in its own mount namespace, with the pod's volumes mounted.

``unshare --mount`` gives each process a private view of the file system, so each one
sees exactly its own pod's files at the paths the manifest names (above all the
service-account token at /var/run/secrets/kubernetes.io/serviceaccount, where every
Kubernetes client library looks) and its own /etc/hosts, while the machine's file system
is unchanged. A mount path that does not exist is created inside an overlay of its
nearest existing parent directory, so nothing is written to, say, /etc. Only a missing
top-level directory (``/config``) has to be created on the machine itself: the runner
records those and removes them when it stops.

The runner's own code and interpreter (the repository, its virtualenv) stay visible at
their paths even when a volume is mounted over a directory above them — say an emptyDir
at /tmp with the checkout in /tmp/prx: they are set aside before the mounts and put back
after them, or the container's command (``/tmp/prx/.venv/bin/prefixroute``) would vanish.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str  # absolute path as the container sees it
    read_only: bool = False


def _nearest_existing(path: str) -> str:
    p = path
    while not os.path.lexists(p):
        p = os.path.dirname(p)
    return p


def runner_paths() -> list[str]:
    """What every process of ours needs to see: this repository and the Python running it."""
    paths = {os.path.realpath(p) for p in (Path(__file__).resolve().parents[1], sys.prefix, sys.base_prefix)}
    return sorted(p for p in paths if not any(p.startswith(o + "/") for o in paths))


def cache_problem(cache: str) -> str | None:
    """Why pods could not read the cache, as a sentence (None: they can). Pods mount an
    emptyDir over /tmp, so a cache under /tmp is invisible to them — the repository and the
    interpreter are put back by `plan`, the cache is not — and they fail much later, far
    from the cause (seen: engine pods that found no model)."""
    real = os.path.realpath(cache)
    if real == "/tmp" or real.startswith("/tmp/"):
        return (
            f"the cache {cache} is under /tmp, which every pod sees as its own empty volume: "
            "set PREFIXROUTE_CACHE to a directory outside /tmp"
        )
    return None


def plan(mounts: list[Mount], scratch: Path, created_top_dirs: set[str], keep: list[str] | None = None) -> list[str]:
    """Shell lines that set up ``mounts`` inside a fresh mount namespace, leaving the
    directories in ``keep`` (default: ``runner_paths()``) visible where they are."""
    lines: list[str] = []
    resolved = []
    for m in sorted(mounts, key=lambda m: m.target.count("/")):
        target = os.path.realpath(m.target)  # /var/run/... -> /run/...
        resolved.append((m, target))
    overlays: list[str] = []
    for _mount, target in resolved:
        if os.path.lexists(target):
            continue
        parent = _nearest_existing(target)
        if parent == "/":
            top = "/" + target.strip("/").split("/")[0]
            if not os.path.exists(top):
                os.makedirs(top, exist_ok=True)
                created_top_dirs.add(top)
            if target == top:
                continue
            parent = top
        if not any(parent == o or parent.startswith(o + "/") for o in overlays):
            overlays = [o for o in overlays if not o.startswith(parent + "/")] + [parent]
    for i, lower in enumerate(sorted(overlays)):
        upper, work = scratch / f"overlay-{i}" / "upper", scratch / f"overlay-{i}" / "work"
        shutil.rmtree(scratch / f"overlay-{i}", ignore_errors=True)
        upper.mkdir(parents=True)
        work.mkdir(parents=True)
        q = shlex.quote
        lines.append(
            f"mount -t overlay overlay -o lowerdir={q(lower)},upperdir={q(str(upper))},"
            f"workdir={q(str(work))} {q(lower)}"
        )
    for m, target in resolved:
        q = shlex.quote
        if m.source.is_dir():
            lines.append(f"mkdir -p {q(target)}")
        else:
            lines.append(f"mkdir -p {q(os.path.dirname(target))} && [ -e {q(target)} ] || : > {q(target)}")
        lines.append(f"mount --bind {q(str(m.source))} {q(target)}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {q(target)}")
    before: list[str] = []
    after: list[str] = []
    targets = [target for _, target in resolved]
    shadowed = [
        k
        for k in (runner_paths() if keep is None else keep)
        if any(k == t or k.startswith(t.rstrip("/") + "/") for t in targets)
    ]
    for i, path in enumerate(shadowed):
        q = shlex.quote
        stash = scratch / f"keep-{i}"
        stash.mkdir(parents=True, exist_ok=True)
        before.append(f"mount --bind {q(path)} {q(str(stash))}")
        after += [f"mkdir -p {q(path)}", f"mount --bind {q(str(stash))} {q(path)}"]
    return before + lines + after


def start(
    argv: list[str],
    env: dict[str, str],
    mounts: list[Mount],
    hosts: Path,
    workdir: Path,
    scratch: Path,
    log: IO[bytes],
    created_top_dirs: set[str],
    user: tuple[int, int] | None = None,
    keep: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a session leader in a private mount namespace; returns its Popen.
    ``keep``: directories that stay visible under the mounts (default ``runner_paths()``)."""
    setup = [
        "set -e",
        *plan(mounts, scratch, created_top_dirs, keep),
        f"mount --bind {shlex.quote(str(hosts))} /etc/hosts",
        f"cd {shlex.quote(str(workdir))}",
    ]  # after the mounts: it may be one of them
    if user is not None and shutil.which("setpriv"):
        uid, gid = user
        setup.append(f'exec setpriv --reuid={uid} --regid={gid} --clear-groups -- "$@"')
    else:
        setup.append('exec "$@"')
    script = "\n".join(setup)
    (scratch / "sandbox.sh").write_text(script + "\n")  # for whoever debugs a failed start
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sandbox", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )
