"""The one folder where prefixroute keeps what it builds, downloads or generates.

``~/.cache/prefixroute``, or ``$PREFIXROUTE_CACHE`` when set: the control plane's binaries and
clusters (e2e), the peer routers' virtual environments, the real vLLM, the local model
folders and bench runs all live under it, never in the repository. Read on every call, so
a test or a script that sets the variable later is obeyed.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "PREFIXROUTE_CACHE"


def cache_dir() -> Path:
    """``$PREFIXROUTE_CACHE`` (``~`` expanded), else ``~/.cache/prefixroute``."""
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "prefixroute"
