"""Reading something small from the API server every few seconds, for a front: in a thread
(the event loop never waits on the API server), applied only when it changed, and through
any failure the last value stays, logged once per kind of failure.

A list, not a watch, for objects that are few and small (an InferencePool and its pods, a
pool's InferenceObjectives): a list cannot miss an event, and a front needs no resync logic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from prefixroute.front.background import cancel_and_wait

T = TypeVar("T")


class ApiPoll(Generic[T]):
    """`read` (blocking, may raise) every `interval` seconds; `apply` each new value, where
    `key` (the value itself by default) tells whether it changed. After a failure `on_failure`
    runs (drop a connection, say) and the next read starts afresh."""

    def __init__(
        self,
        what: str,
        read: Callable[[], T],
        interval: float,
        log: logging.Logger,
        key: Callable[[T], object] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self.what = what
        self.read = read
        self.interval = interval
        self.log = log
        self.key = key
        self.on_failure = on_failure
        self._last: object = _NOTHING
        self._problem = ""
        self._task: asyncio.Task[None] | None = None

    async def poll(self, apply: Callable[[T], None]) -> None:
        try:
            value = await asyncio.to_thread(self.read)
        except Exception as exc:  # keep the last value; say so once per kind of failure
            if self.on_failure is not None:
                self.on_failure()
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._problem:
                self.log.warning("reading %s failed (%s); keeping the last", self.what, problem)
            self._problem = problem
            return
        self._problem = ""
        key = value if self.key is None else self.key(value)
        if key != self._last:
            self._last = key
            apply(value)

    async def start(self, apply: Callable[[T], None]) -> None:
        await self.poll(apply)
        self._task = asyncio.create_task(self._run(apply), name=f"poll {self.what}")

    async def _run(self, apply: Callable[[T], None]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.poll(apply)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


class _Nothing:
    """No value read yet (None may be a value)."""


_NOTHING = _Nothing()
