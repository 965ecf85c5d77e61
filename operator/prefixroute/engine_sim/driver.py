"""Runs the pure scheduler in real time on the event loop.

The scheduler lives in model time (seconds of the simulated GPU); the driver's
clock is wall time since start multiplied by `time_scale`, so with
`--time-scale 10` every delay is ten times shorter while every reported time
(metrics, TTFT) stays in model seconds. One task sleeps until the scheduler's
next event, is woken early by every submit or abort, and resolves the futures
the HTTP handlers wait on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field, replace
from typing import Protocol

from prefixroute.engine_model.adapters import AdapterSlots
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.kv_cache import KVCache
from prefixroute.engine_model.scheduler import Event, EventKind, Scheduler, Sequence
from prefixroute.routing.kv_events import BlockStored, KVEvent

Listener = Callable[[Event], None]


class KVEventSink(Protocol):
    """Where one engine step's KV cache events go (the ZMQ publisher)."""

    def publish(self, events: Seq[KVEvent]) -> None: ...


@dataclass(eq=False)
class Handle:
    """What a handler awaits for one sequence."""

    sequence: Sequence
    first_token: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    finished: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class EngineDriver:
    def __init__(
        self,
        config: EngineConfig,
        clock: Callable[[], float] = time.monotonic,
        kv_events: KVEventSink | None = None,
    ) -> None:
        self.config = config
        self._kv_events = kv_events
        self._kv_step: list[KVEvent] = []  # the events of the step in progress
        self.cache = KVCache(
            config.kv_blocks, config.block_tokens, self._kv_step.append if kv_events is not None else None
        )
        slots = AdapterSlots(config.max_loras, config.lora_load_seconds) if config.max_loras > 0 else None
        self.scheduler = Scheduler(self.cache, config.latency, config.max_running, slots)
        self.lora_ids: Mapping[str, int] = {}  # adapter name -> vLLM's integer id, for the events' lora_id
        self._clock = clock
        self._t0 = clock()
        self._ids = itertools.count()
        self._handles: dict[str, Handle] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Listener] = []

    def now(self) -> float:
        """Model time: wall seconds since start x time_scale."""
        return (self._clock() - self._t0) * self.config.time_scale

    def wall_seconds(self, model_seconds: float) -> float:
        return max(0.0, model_seconds) / self.config.time_scale

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-sim scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def submit(
        self,
        blocks: Seq[int],
        prompt_tokens: int,
        output_tokens: int,
        payload: object = None,
        tokens: Seq[int] | None = None,
        salt: str | None = None,
        adapter: str | None = None,
    ) -> Handle:
        """Queue a prompt for the base model or a LoRA `adapter`; `tokens` and `salt` are what
        its KV cache events carry (when published)."""
        seq = Sequence(
            f"seq-{next(self._ids)}", blocks, prompt_tokens, output_tokens, self.now(), payload=payload, adapter=adapter
        )
        if self._kv_events is not None:
            seq.tokens, seq.salt = tokens, salt
        handle = Handle(seq)
        self._handles[seq.id] = handle
        self.scheduler.submit(seq, seq.arrival)
        self._dispatch(self.scheduler.drain())
        self._poke()
        return handle

    def abort(self, handle: Handle) -> None:
        self.scheduler.abort(handle.sequence, self.now())
        self._handles.pop(handle.sequence.id, None)
        for fut in (handle.first_token, handle.finished):
            if not fut.done():
                fut.cancel()
        self._dispatch(self.scheduler.drain())
        self._poke()

    def reset_cache(self) -> None:
        """Drop every cached block (POST /reset_prefix_cache); published as AllBlocksCleared."""
        self.cache.reset()
        self._publish_step()

    def _publish_step(self) -> None:
        if self._kv_step and self._kv_events is not None:
            self._kv_events.publish([self._with_lora_id(event) for event in self._kv_step])
        self._kv_step.clear()

    def _with_lora_id(self, event: KVEvent) -> KVEvent:
        """vLLM's events carry the adapter's integer id next to its name; the cache knows the name only."""
        if isinstance(event, BlockStored) and event.lora_name is not None:
            return replace(event, lora_id=self.lora_ids.get(event.lora_name))
        return event

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _dispatch(self, events: list[Event]) -> None:
        self._publish_step()  # the cache changes of this step, before anyone hears of its effects
        for event in events:
            for listener in self.listeners:
                listener(event)
            handle = self._handles.get(event.sequence.id)
            if handle is None:
                continue
            if event.kind is EventKind.FIRST_TOKEN and not handle.first_token.done():
                handle.first_token.set_result(None)
            elif event.kind is EventKind.FINISHED:
                self._handles.pop(event.sequence.id, None)
                if not handle.first_token.done():
                    handle.first_token.set_result(None)
                if not handle.finished.done():
                    handle.finished.set_result(None)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._dispatch(self.scheduler.advance(self.now()))
            due = self.scheduler.next_event_time()
            self._wake.clear()
            timeout = None if due is None else self.wall_seconds(due - self.now())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
