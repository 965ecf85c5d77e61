"""The operator's plain HTTP reads: a router's /metrics (the status columns' figures)."""

from __future__ import annotations

import urllib.request

TIMEOUT_SECONDS = 2.0


def get_text(url: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """GET ``url``; raises OSError (URLError, timeouts) when it cannot be read."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # an http:// URL of ours
        return str(response.read().decode("utf-8", errors="replace"))
