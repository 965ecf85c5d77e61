"""Ending a front's background task (a scraper, a poller, a watch): cancel it and wait until it
has ended, so nothing it holds outlives `stop()`."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` (None: nothing running) and wait for it; its CancelledError is expected."""
    if task is None:
        return
    task.cancel()
    # asyncio.wait, not `await task` inside suppress(CancelledError): that would also swallow
    # the caller's own cancellation, arriving while it waits here, and the caller would go on.
    await asyncio.wait((task,))
    if not task.cancelled():
        task.result()  # a task that failed before it was cancelled raises its own error
