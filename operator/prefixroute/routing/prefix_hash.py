"""prefix-hash: consistent hashing with bounded loads (CHWBL) on the first K blocks.

The key is the chained hash of block K-1, which covers blocks 0..K-1. Walking
clockwise from it, the first member whose load stays within its bound
(load_factor x its fair share, or the fair share plus `load_slack` requests when
that is more; this request counted) takes it, so a hot key spills to the next
member on the ring rather than to a random one.
"""

from __future__ import annotations

from collections.abc import Collection

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates, least_relative_load, member_bounds, within_bound


def bounded_walk(
    key: int, fleet: Fleet, load: LoadTracker, exclude: Collection[str], load_factor: float, slack: int = 0
) -> Member:
    """The first member clockwise from `key` that is within its load bound."""
    members = candidates(fleet, exclude)
    loads = {m.name: load.get(m.name).requests for m in members}
    bounds = member_bounds(members, loads, load_factor, slack)
    for name in fleet.ring.walk(key):
        if name in bounds and within_bound(loads[name], bounds[name]):
            return fleet.by_name[name]
    return least_relative_load(members, loads)


class PrefixHash(StrategyBase):
    name = "prefix-hash"

    def __init__(self, load_factor: float, load_slack: int = 0) -> None:
        self.load_factor = load_factor
        self.load_slack = load_slack

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        return bounded_walk(request.key, fleet, load, exclude, self.load_factor, self.load_slack)
