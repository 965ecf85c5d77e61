"""Routing settings shared by the router's flags, the CRD's spec.routing and the simulator.

Each field is a knob declared in routing/knobs.py — its default, bounds and help are
written there and nowhere else; this class gives them a typed, immutable home and
refuses values the declaration does not allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixroute.routing import knobs
from prefixroute.routing.knobs import ROUTING_KNOBS, STRATEGY_NAMES

__all__ = ["DEFAULT_STRATEGY", "STRATEGY_NAMES", "RoutingConfig"]

DEFAULT_STRATEGY = knobs.STRATEGY.default


@dataclass(frozen=True)
class RoutingConfig:
    strategy: str = knobs.STRATEGY.default
    block_size: int = knobs.BLOCK_SIZE.default
    prefix_blocks: int = knobs.PREFIX_BLOCKS.default
    load_factor: float = knobs.LOAD_FACTOR.default
    load_slack: int = knobs.LOAD_SLACK.default
    virtual_nodes: int = knobs.VIRTUAL_NODES.default
    normalise: bool = knobs.NORMALISE.default
    isolate_tenants: bool = knobs.ISOLATE_TENANTS.default
    index_blocks_per_member: int = knobs.INDEX_BLOCKS.default
    queue_penalty: float = knobs.QUEUE_PENALTY.default
    adapter_slots: int = knobs.ADAPTER_SLOTS.default
    adapter_load_cost: int | None = knobs.ADAPTER_LOAD_COST.default

    def __post_init__(self) -> None:
        for knob in ROUTING_KNOBS:
            knob.check(getattr(self, knob.name))
