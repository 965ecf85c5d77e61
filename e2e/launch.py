"""A container's process just before it starts, as an image's adapter sees it.

The pod runner builds a ``Launch`` for every container it starts (e2e/podprocess.py) and
hands it to the image's adapter, if the image has one (e2e/images.py); the adapter returns
the launch to run. Its own module because both sides need it: the image table names the
adapters, and an adapter (e2e/vllmcpu.py) reads and returns launches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Launch:
    """What an adapter may look at and change before a process starts."""

    argv: list[str]
    env: dict[str, str]
    pod_ip: str
    scratch: str
    """A writable directory of this container's own (temporary files, sockets), as the
    process sees it: its private /tmp where the image has one (``private_tmp``)."""
    cpu: int
    """A CPU of this machine for this container alone, where the image wants one."""
    notes: list[str] = field(default_factory=list)
    """What the adapter changed and why: written at the top of the container's log."""


Adapter = Callable[[Launch], Launch]
"""An image's changes to a launch: a new launch from the old one."""
