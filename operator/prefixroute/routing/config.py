"""Routing settings shared by the router's flags, the CRD's spec.routing and the simulator."""

from __future__ import annotations

from dataclasses import dataclass

from prefixroute.routing.blocks import DEFAULT_BLOCK_SIZE
from prefixroute.routing.ring import DEFAULT_VIRTUAL_NODES

STRATEGY_NAMES = ("prefix-cache", "prefix-hash", "least-load", "round-robin")
DEFAULT_STRATEGY = "prefix-cache"


@dataclass(frozen=True)
class RoutingConfig:
    strategy: str = DEFAULT_STRATEGY
    block_size: int = DEFAULT_BLOCK_SIZE  # characters per block (tokens with a tokenizer)
    prefix_blocks: int = 4  # K: blocks in prefix-hash's affinity key (4 x 256 chars ~ 256 tokens)
    load_factor: float = 1.25  # a member above load_factor x mean load takes no affinity traffic
    # ...unless it holds fewer than its fair share plus this many requests: at low load the
    # relative bound alone (1.25 x 0.5 requests) would split every session. Chosen in
    # simulation of the Mooncake trace (docs/benchmarks.md): 0 gave 20.7% hits, 3 gave 32%.
    load_slack: int = 3
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    normalise: bool = True
    isolate_tenants: bool = False
    # prefix-cache: blocks remembered per member (LRU); 16384 x 256 chars ~ 1M tokens,
    # about what one 80 GB GPU holds for an 8B model after weights.
    index_blocks_per_member: int = 16384
    # prefix-cache: weight of the prefill queued ahead against this request's own uncached
    # prefill (both in prompt units); below 1 because a cache hit also spares the engine
    # work that later requests would queue behind. 0.5 was best in simulation.
    queue_penalty: float = 0.5

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGY_NAMES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGY_NAMES)}")
        if self.block_size <= 0:
            raise ValueError("block size must be positive")
        if self.prefix_blocks <= 0:
            raise ValueError("prefix blocks must be positive")
        if self.load_factor < 1.0:
            raise ValueError("load factor must be at least 1.0")
        if self.load_slack < 0:
            raise ValueError("load slack must not be negative")
        if self.virtual_nodes <= 0:
            raise ValueError("virtual nodes must be positive")
        if self.index_blocks_per_member <= 0:
            raise ValueError("index size must be positive")
        if self.queue_penalty < 0:
            raise ValueError("queue penalty must not be negative")
