"""The one hook the router added to the routing core's Strategy interface: matched_blocks."""

from __future__ import annotations

import pytest

from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import routing_request

CONFIG = RoutingConfig(block_size=8, prefix_blocks=2)


def test_prefix_cache_reports_what_it_routed() -> None:
    strategy = make_strategy(CONFIG)
    fleet = Fleet.from_urls(["http://a", "http://b"])
    request = routing_request("x" * 40, CONFIG)
    member = strategy.select(request, fleet, LoadTracker())
    assert strategy.matched_blocks(request, member) == 0
    strategy.on_routed(request, member)
    assert strategy.matched_blocks(request, member) == len(request.blocks) == 5
    longer = routing_request("x" * 40 + "y" * 16, CONFIG)
    assert strategy.matched_blocks(longer, member) == 5


@pytest.mark.parametrize("name", [n for n in STRATEGY_NAMES if n != "prefix-cache"])
def test_other_strategies_make_no_estimate(name: str) -> None:
    config = RoutingConfig(strategy=name, block_size=8)
    strategy = make_strategy(config)
    fleet = Fleet.from_urls(["http://a"])
    request = routing_request("x" * 40, config)
    member = strategy.select(request, fleet, LoadTracker())
    strategy.on_routed(request, member)
    assert strategy.matched_blocks(request, member) is None
