"""Waiting in async tests for something another task or process makes true."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(check: Callable[[], bool], what: str, tries: int = 200, interval: float = 0.05) -> None:
    """Poll `check` until it holds; fail naming `what` after `tries` polls."""
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
