"""Holding requests while no engine can take them (a model scaled to zero, or every engine
restarting), instead of answering 503 at once.

A request that finds no routable member waits until one appears — the operator's
autoscaler reads the count of held requests (``prefixroute_router_held_requests``) and
scales a model at zero replicas up to one — for at most ``seconds``, then gets a 503 with
Retry-After; at most ``limit`` requests wait at once, and one more is answered 503 at once.
Nothing is queued or reordered: every held request goes on when the fleet has a member
again, and routing decides then. ``seconds`` 0 turns holding off.
"""

from __future__ import annotations

import asyncio
from collections import Counter

SERVED, TIMED_OUT, FULL = "served", "timeout", "full"
RETRY_AFTER_SECONDS = 5  # after a hold timed out: an engine is likely on its way


class HoldFailed(Exception):
    """A request was held as long as allowed (or could not be held): answer 503."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Holding:
    def __init__(self, seconds: float, limit: int) -> None:
        self.seconds = seconds
        self.limit = limit
        self.held = 0  # requests waiting now
        self.outcomes: Counter[str] = Counter()  # how holds ended: served, timeout, full
        self._ready = asyncio.Event()  # set while the fleet has a routable member

    def fleet_changed(self, routable: bool) -> None:
        if routable:
            self._ready.set()
        else:
            self._ready.clear()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait(self) -> None:
        """Return once a member is routable; raise HoldFailed when holding is off, full or over."""
        if self._ready.is_set():
            return
        if self.seconds <= 0:
            raise HoldFailed("no ready model server is available", 1)
        if self.held >= self.limit:
            self.outcomes[FULL] += 1
            raise HoldFailed(
                f"no ready model server is available and {self.held} requests already wait for one",
                RETRY_AFTER_SECONDS,
            )
        self.held += 1
        try:
            await asyncio.wait_for(self._ready.wait(), self.seconds)
        except TimeoutError:
            self.outcomes[TIMED_OUT] += 1
            raise HoldFailed(
                f"no model server became ready within {self.seconds:g}s (the model may be starting "
                "from zero replicas; try again shortly)",
                RETRY_AFTER_SECONDS,
            ) from None
        finally:
            self.held -= 1
        self.outcomes[SERVED] += 1
