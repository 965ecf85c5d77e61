"""Waiting on the cluster: the two helpers every e2e module uses."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from e2e.kube import ApiError, Kube

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.2, what: str = "") -> T:
    """Call ``check`` until it returns something truthy; the last error or value explains a timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as e:  # reported on timeout
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}: last {last!r}")
        time.sleep(interval)


def absent(kube: Kube, path: str) -> bool:
    """The object at ``path`` is gone (404); any other API error is raised."""
    try:
        kube.get(path)
    except ApiError as e:
        if e.status == 404:
            return True
        raise
    return False
