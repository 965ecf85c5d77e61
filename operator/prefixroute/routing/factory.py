"""The one place where strategy names become strategies."""

from __future__ import annotations

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import UnknownStrategy
from prefixroute.routing.least_load import LeastLoad
from prefixroute.routing.prefix_cache import PrefixCache
from prefixroute.routing.prefix_hash import PrefixHash
from prefixroute.routing.round_robin import RoundRobin
from prefixroute.routing.strategy import Strategy


def make_strategy(config: RoutingConfig) -> Strategy:
    if config.strategy == "prefix-cache":
        return PrefixCache(config)
    if config.strategy == "prefix-hash":
        return PrefixHash(config.load_factor, config.load_slack, config.prefix_blocks)
    if config.strategy == "least-load":
        return LeastLoad()
    if config.strategy == "round-robin":
        return RoundRobin()
    raise UnknownStrategy(f"unknown strategy {config.strategy!r}")
