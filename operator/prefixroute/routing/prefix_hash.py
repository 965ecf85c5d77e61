"""prefix-hash: consistent hashing with bounded loads (CHWBL) on the first K blocks.

The key is the chained hash of block K-1, which covers blocks 0..K-1. Walking
clockwise from it, the first member whose load stays within
load_factor x mean (this request counted) takes the request, so a hot key spills
to the next member on the ring rather than to a random one.
"""

from __future__ import annotations

from collections.abc import Collection

from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates, load_bound, within_bound


def bounded_walk(
    key: int, fleet: Fleet, load: LoadTracker, exclude: Collection[str], load_factor: float
) -> Member:
    """The first member clockwise from `key` that is within the load bound."""
    members = candidates(fleet, exclude)
    total = sum(load.get(m.name).requests for m in members)
    bound = load_bound(total, len(members), load_factor)
    allowed = {m.name for m in members}
    fallback: Member | None = None
    for name in fleet.ring.walk(key):
        if name not in allowed:
            continue
        member = fleet.by_name[name]
        if within_bound(load.get(name).requests, bound):
            return member
        if fallback is None or load.get(name).requests < load.get(fallback.name).requests:
            fallback = member
    if fallback is None:
        raise NoMemberAvailable("no ready member is left to take the request")
    return fallback


class PrefixHash(StrategyBase):
    name = "prefix-hash"

    def __init__(self, load_factor: float) -> None:
        self.load_factor = load_factor

    def select(
        self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()
    ) -> Member:
        return bounded_walk(request.key, fleet, load, exclude, self.load_factor)
