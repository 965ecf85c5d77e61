"""Ending a front's background task (a scraper, a poller, a watch): cancel it and wait until it
has ended, so nothing it holds outlives `stop()`."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` (None: nothing running) and wait for it; its CancelledError is expected."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
