"""Small builders shared by the routing core tests."""

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import RoutingRequest, routing_request

SMALL_BLOCKS = RoutingConfig(block_size=16, prefix_blocks=2)


def text_request(text: str, config: RoutingConfig = SMALL_BLOCKS, tenant: str | None = None) -> RoutingRequest:
    return routing_request(text, config, tenant)


def fleet_of(n: int, **weights: float) -> Fleet:
    return Fleet(tuple(Member(f"m{i}", f"http://m{i}", weights.get(f"m{i}", 1.0)) for i in range(n)))
