"""What one pod's worker needs from the runner that hosts it, and the runner's settings.

The runner (e2e/podrunner.py) starts a worker (e2e/podworker.py) for every pod it takes;
the worker reads the runner's settings and uses a few node-wide services: the API client,
the image table, CPUs handed out per container, the process list ``down`` stops,
ConfigMap and Secret lookups. Naming those here, rather than the runner's class, keeps the
worker from importing the runner that imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from e2e.images import Image
from e2e.kube import Kube
from e2e.serviceproxy import ServiceProxy


@dataclass(frozen=True)
class RunnerSettings:
    repositories: tuple[str, ...]
    state_dir: Path
    log_dir: Path
    api_host: str
    api_port: int
    host_ip: str
    venv_bin: Path
    entrypoint: tuple[str, ...] = ("prefixroute",)
    default_args: tuple[str, ...] = ("--help",)
    image_user: tuple[int, int] | None = (65532, 65532)
    backoff_base: float = 1.0
    backoff_cap: float = 30.0
    extra_hosts: Mapping[str, list[str]] = field(default_factory=dict)
    targets_file: Path | None = None
    service_proxy: bool = False
    kubelet_port: int | None = None
    """Where the kubelet endpoint (container logs, e2e/kubeletserver.py) listens on
    ``host_ip``; None: no endpoint."""
    kubelet_tls: tuple[Path, Path, Path] | None = None
    """Its certificate, key and the CA its clients' certificates come from."""


class PodHost(Protocol):
    """The runner as one pod's worker sees it."""

    kube: Kube
    cfg: RunnerSettings
    stopping: threading.Event
    """Set when the runner shuts down: every worker stops its pod's processes."""
    proxy: ServiceProxy | None
    can_switch_user: bool
    """Whether containers can run as their image's non-root user here."""
    created_top_dirs: set[str]
    """Top-level directories of this machine made for mount points that had none, removed
    when the runner stops."""

    def image_of(self, container: Mapping[str, Any]) -> Image: ...

    def cpu_for(self, pod_uid: str, container: str) -> int: ...

    def release_cpus(self, pod_uid: str) -> None: ...

    def lookup(self, kind: str, ns: str, name: str) -> dict[str, str] | None: ...

    def track(self, pid: int) -> None: ...

    def untrack(self, pid: int) -> None: ...
