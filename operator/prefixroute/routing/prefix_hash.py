"""prefix-hash: consistent hashing with bounded loads (CHWBL) on the affinity key.

The key is the chained hash of the first K blocks past the prefix that nearly
all traffic shares (`affinity_key`; the first K blocks when nothing is shared),
so a system prompt in every request does not give every request one key.
Walking clockwise from it, the first member whose load stays within its bound
(load_factor x its fair share, or the fair share plus `load_slack` requests when
that is more; this request counted) takes it, so a hot key spills to the next
member on the ring rather than to a random one.
"""

from __future__ import annotations

from collections.abc import Collection

from prefixroute.routing.affinity_key import AffinityKeys
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import LoadBounds, StrategyBase, candidates, least_relative_load


def bounded_walk(
    key: int, fleet: Fleet, load: LoadTracker, exclude: Collection[str], load_factor: float, slack: int = 0
) -> Member:
    """The first member clockwise from `key` that is within its load bound."""
    bounds = LoadBounds(fleet, load, exclude, load_factor, slack)
    for name in fleet.ring.walk(key):
        if name not in exclude and bounds.fits(name):
            return fleet.by_name[name]
    members = candidates(fleet, exclude)
    return least_relative_load(members, {m.name: load.get(m.name).requests for m in members})


class PrefixHash(StrategyBase):
    name = "prefix-hash"

    def __init__(self, load_factor: float, load_slack: int = 0, prefix_blocks: int = 4) -> None:
        self.load_factor = load_factor
        self.load_slack = load_slack
        self.keys = AffinityKeys(prefix_blocks, load_factor)

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        key = self.keys.key(request, len(fleet.routable))
        return bounded_walk(key, fleet, load, exclude, self.load_factor, self.load_slack)

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        self.keys.learn(request)

    def on_peer_routed(self, request: RoutingRequest, member: str, fleet: Fleet) -> None:
        self.keys.learn_elsewhere(request, len(fleet.routable))
