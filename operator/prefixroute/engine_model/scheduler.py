"""The engine's scheduler: who runs, who waits, and when each token comes out.

Pure and clock-free: every method takes `now` (seconds on any clock), so the
live server drives it with the event loop's time and the bench's simulation
with virtual time — the same code either way.

Rules:
- at most `max_running` sequences run; the rest wait first come, first served;
- the waiting head starts when a running slot is free and the GPU is not busy
  with another prefill (prefills run one at a time); with LoRA adapters
  (`adapters`), a request whose adapter can take no slot is skipped until one
  frees, and one whose adapter is not resident first loads it (`AdapterSlots`);
- starting = looking the prompt up in the KV cache and taking its blocks; the
  prefill then takes `uncached tokens / prefill rate`, and the first output
  token comes out at its end;
- the remaining output tokens follow at the per-sequence decode rate, and the
  sequence leaves, freeing its slot and releasing its blocks to the cache's free
  queue, when the last one is out (or when it is aborted).

Transitions are reported as `Event`s, in time order, by `advance` and `drain`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from enum import Enum

from prefixroute.engine_model.adapters import AdapterSlots
from prefixroute.engine_model.kv_cache import KVCache
from prefixroute.engine_model.latency import LatencyModel


class State(Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"
    ABORTED = "aborted"


class EventKind(Enum):
    STARTED = "started"  # left the queue; cache looked up (cached_tokens is set)
    FIRST_TOKEN = "first_token"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One request's life in the engine; the scheduler fills in the times."""

    id: str
    blocks: Seq[int]  # chained block hashes of the prompt
    prompt_tokens: int
    output_tokens: int
    arrival: float
    state: State = State.WAITING
    cached_tokens: int = 0
    started: float | None = None
    first_token: float | None = None
    finished: float | None = None
    payload: object = field(default=None, repr=False)  # the caller's own data
    tokens: Seq[int] | None = field(default=None, repr=False)  # the prompt's token ids, for KV cache events
    salt: str | None = None  # the request's cache_salt, for KV cache events
    adapter: str | None = None  # the LoRA adapter it runs with (None: the base model)
    adapter_load_seconds: float = 0.0  # spent loading its adapter into a slot before its prefill

    def tokens_out_by(self, now: float, decode_tokens_per_s: float) -> int:
        """Output tokens produced by `now` (0 before the first token)."""
        if self.first_token is None or now < self.first_token:
            return 0
        if self.finished is not None and now >= self.finished:
            return self.output_tokens
        done = 1 + int((now - self.first_token) * decode_tokens_per_s + 1e-9)
        return min(self.output_tokens, done)


@dataclass(frozen=True, slots=True)
class Event:
    time: float
    kind: EventKind
    sequence: Sequence


class Scheduler:
    def __init__(
        self, cache: KVCache, latency: LatencyModel, max_running: int, adapters: AdapterSlots | None = None
    ) -> None:
        if max_running <= 0:
            raise ValueError("max_running must be positive")
        self.cache = cache
        self.latency = latency
        self.max_running = max_running
        self.adapters = adapters  # None: the engine serves no LoRA adapters
        self.waiting: deque[Sequence] = deque()
        self.running: dict[str, Sequence] = {}
        self._gpu_free_at = float("-inf")  # end of the prefill in progress
        self._timers: list[tuple[float, int, EventKind, Sequence]] = []
        self._order = itertools.count()
        self._outbox: list[Event] = []

    # -- inputs -------------------------------------------------------------

    def submit(self, seq: Sequence, now: float) -> None:
        """A request arrives: it waits, and starts at once if nothing is ahead of it."""
        if seq.output_tokens < 1:
            raise ValueError("a sequence produces at least one token")
        seq.state = State.WAITING
        self.waiting.append(seq)
        self._start_waiting(now)

    def abort(self, seq: Sequence, now: float) -> None:
        """The client went away: drop the sequence wherever it is. A prefill in
        progress still occupies the GPU until its end (its work is wasted)."""
        if seq.state is State.WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        elif seq.state in (State.PREFILL, State.DECODE):
            self.running.pop(seq.id, None)
            self.cache.release(seq.blocks)
            if self.adapters is not None:
                self.adapters.finish(seq.adapter)
        else:
            return
        seq.state = State.ABORTED
        self._start_waiting(now)

    # -- time ---------------------------------------------------------------

    def next_event_time(self) -> float | None:
        """When `advance` next has something to do (None: idle until a submit)."""
        timers = self._timers
        while timers and timers[0][3].state is State.ABORTED:
            heapq.heappop(timers)
        pending = timers[0][0] if timers else None
        if len(self.running) < self.max_running and self._startable() is not None:
            # Only the GPU blocks the head: wake when the prefill in progress ends.
            pending = self._gpu_free_at if pending is None else min(pending, self._gpu_free_at)
        return pending

    def advance(self, now: float) -> list[Event]:
        """Process everything due by `now`, in time order; return the events since the last call."""
        timers = self._timers
        while True:
            while timers and timers[0][3].state is State.ABORTED:
                heapq.heappop(timers)
            head_start = self._next_start_time()
            timer_at = timers[0][0] if timers else None
            if head_start is not None and head_start <= now and (timer_at is None or head_start <= timer_at):
                self._start_waiting(head_start)
                continue
            if timer_at is None or timer_at > now:
                break
            at, _, kind, seq = heapq.heappop(timers)
            if kind is EventKind.FIRST_TOKEN:
                seq.state = State.DECODE
            else:
                seq.state = State.FINISHED
                self.running.pop(seq.id, None)
                self.cache.release(seq.blocks)
                if self.adapters is not None:
                    self.adapters.finish(seq.adapter)
            self._outbox.append(Event(at, kind, seq))
            self._start_waiting(at)
        return self.drain()

    def drain(self) -> list[Event]:
        out, self._outbox = self._outbox, []
        return out

    # -- state --------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_usage(self) -> float:
        """Fraction of KV blocks that running sequences occupy (vllm:kv_cache_usage_perc)."""
        per_block = self.cache.block_tokens
        used = sum(-(-(s.prompt_tokens + s.output_tokens) // per_block) for s in self.running.values())
        return min(1.0, used / self.cache.capacity_blocks)

    # -- internals ----------------------------------------------------------

    def _next_start_time(self) -> float | None:
        if len(self.running) >= self.max_running:
            return None
        head = self._startable()
        return None if head is None else max(self._gpu_free_at, head.arrival)

    def _startable(self) -> Sequence | None:
        """The first waiting sequence that may start (its adapter can take a slot)."""
        if not self.waiting:
            return None
        slots = self.adapters
        if slots is None:
            return self.waiting[0]
        return next((s for s in self.waiting if slots.can_start(s.adapter)), None)

    def _start_waiting(self, now: float) -> None:
        """Start waiting sequences while a slot is free and the GPU is idle at `now`."""
        while len(self.running) < self.max_running and self._gpu_free_at <= now:
            seq = self._startable()
            if seq is None:
                return
            if seq is self.waiting[0]:
                self.waiting.popleft()
            else:
                self.waiting.remove(seq)
            seq.state = State.PREFILL
            seq.started = now
            seq.cached_tokens = self.cache.serve(seq.blocks, seq.prompt_tokens, seq.tokens, seq.salt, seq.adapter)
            seq.tokens = None  # the events are out; a long prompt's ids need not live as long as the sequence
            if self.adapters is not None:
                seq.adapter_load_seconds = self.adapters.start(seq.adapter)
            prefill = self.latency.prefill_seconds(seq.prompt_tokens - seq.cached_tokens)
            seq.first_token = now + seq.adapter_load_seconds + prefill
            seq.finished = seq.first_token + self.latency.decode_seconds(seq.output_tokens - 1)
            self._gpu_free_at = seq.first_token
            self.running[seq.id] = seq
            self._outbox.append(Event(now, EventKind.STARTED, seq))
            heapq.heappush(self._timers, (seq.first_token, next(self._order), EventKind.FIRST_TOKEN, seq))
            heapq.heappush(self._timers, (seq.finished, next(self._order), EventKind.FINISHED, seq))
