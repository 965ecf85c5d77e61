"""Installing a missing Debian package, for the commands that shell out to a system tool:
router-bench (wrk) and the e2e cluster's build (Prometheus, wrk). Only where this runs as
root on a machine with apt-get; elsewhere the caller says what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence


def can_install() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def install_command(packages: Sequence[str]) -> list[str]:
    """What `install` runs first (and callers print)."""
    return ["apt-get", "install", "-y", "--no-install-recommends", *packages]


def install(packages: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """`install_command`; when that fails, ``apt-get update`` and the install again (a fresh
    machine may have no package lists yet). Output is captured (callers run it beside builds
    whose progress it would bury); the result is the first step that failed, else the last
    install."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = install_command(packages)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        for step in (["apt-get", "update"], command):
            done = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                break
    return done
