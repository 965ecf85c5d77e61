"""A multi-adapter workload: a trace's conversations, each served by one LoRA adapter.

Users of a multi-adapter deployment are applications, each fine-tuned once: every turn
of a conversation goes to the same adapter, and a few adapters take most of the traffic.
So each conversation of a Mooncake trace (the requests whose first prefix block is the
same: turn after turn of one chat, or one application's shared system prompt) is given
one adapter, drawn with Zipf popularity (adapter k of n with weight 1/k^exponent), and a
share of conversations stays on the base model. The draw is a pure function of the seed
and the conversation, not of the order requests are read in, so a live bench and the
simulation given the same trace and mix ask for the same adapters.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from prefixroute.bench.trace import TraceRow, read_rows, trace_request
from prefixroute.bench.workload import BenchRequest


@dataclass(frozen=True)
class AdapterMix:
    """How a trace's conversations are spread over adapters."""

    adapters: int = 50
    exponent: float = 1.0  # Zipf: adapter k (from 1) is asked for in proportion to 1/k^exponent
    base_share: float = 0.1  # conversations on the base model
    seed: int = 0

    def __post_init__(self) -> None:
        if self.adapters < 1:
            raise ValueError("an adapter workload needs at least one adapter")
        if not self.exponent >= 0:
            raise ValueError("the Zipf exponent must not be negative")
        if not 0 <= self.base_share <= 1:
            raise ValueError("the base model's share must be between 0 and 1")

    @property
    def names(self) -> tuple[str, ...]:
        """The adapters' names, most popular first."""
        return adapter_names(self.adapters)

    def weights(self) -> list[float]:
        """Each adapter's share of the adapter traffic, most popular first (they sum to 1)."""
        raw = [1.0 / (k**self.exponent) for k in range(1, self.adapters + 1)]
        total = sum(raw)
        return [w / total for w in raw]


def adapter_names(count: int) -> tuple[str, ...]:
    """`count` adapter names, in popularity order: adapter-00, adapter-01, ..."""
    width = max(2, len(str(count - 1)))
    return tuple(f"adapter-{k:0{width}d}" for k in range(count))


def conversation_of(row: TraceRow) -> int:
    """A row's conversation: its first prefix block (a row without any is its own)."""
    return row.hash_ids[0] if row.hash_ids else -row.line


def adapter_for(conversation: int, mix: AdapterMix) -> str | None:
    """The adapter of one conversation under `mix` (None: the base model)."""
    rng = random.Random(f"{mix.seed}:{conversation}")  # the conversation's own draw
    if rng.random() < mix.base_share:
        return None
    cumulative = list(itertools.accumulate(mix.weights()))
    pick = min(bisect.bisect_left(cumulative, rng.random() * cumulative[-1]), mix.adapters - 1)
    return mix.names[pick]


def with_adapters(rows: Sequence[TraceRow], requests: Sequence[BenchRequest], mix: AdapterMix) -> list[BenchRequest]:
    """`requests` (one per row, in the same order) each asking for its conversation's adapter."""
    if len(rows) != len(requests):
        raise ValueError("one request per trace row")
    chosen: dict[int, str | None] = {}
    out = []
    for row, request in zip(rows, requests):
        conversation = conversation_of(row)
        if conversation not in chosen:
            chosen[conversation] = adapter_for(conversation, mix)
        out.append(replace(request, adapter=chosen[conversation]))
    return out


def load_adapter_trace(path: str | Path, mix: AdapterMix) -> list[BenchRequest]:
    """A Mooncake trace's requests (as `trace.load_trace` reads them), each with the adapter
    of its conversation, in arrival order."""
    rows = read_rows(path)
    start = min(r.timestamp_ms for r in rows)
    requests = with_adapters(rows, [trace_request(r, start) for r in rows], mix)
    requests.sort(key=lambda r: r.at)
    return requests


def placement(mix: AdapterMix, replicas: Sequence[str], per_adapter: int) -> dict[str, frozenset[str]]:
    """Each adapter registered on `per_adapter` of `replicas` (all of them when it is at least
    their number), spread round the replicas in popularity order so each holds about as many:
    replica -> the adapters registered there."""
    if per_adapter < 1:
        raise ValueError("each adapter needs at least one replica")
    count = min(per_adapter, len(replicas))
    held: dict[str, set[str]] = {r: set() for r in replicas}
    for k, name in enumerate(mix.names):
        for j in range(count):
            held[replicas[(k * count + j) % len(replicas)]].add(name)
    return {r: frozenset(names) for r, names in held.items()}
