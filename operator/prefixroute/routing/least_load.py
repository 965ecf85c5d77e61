"""least-load: the member with the fewest requests, ties broken by the ring.

It must look at every member's load (that is what it is), but only the tied
members are placed on the ring walk from the key (`HashRing.distance`, one
bisection each), never the whole ring."""

from __future__ import annotations

from collections.abc import Collection

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates


class LeastLoad(StrategyBase):
    name = "least-load"

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        members = candidates(fleet, exclude)
        loads = {m.name: (load.get(m.name).requests, load.get(m.name).units) for m in members}
        least = min(loads.values())
        tied = [m for m in members if loads[m.name] == least]
        if len(tied) == 1:
            return tied[0]
        ring = fleet.ring
        return min(tied, key=lambda m: (ring.distance(request.key, m.name), m.name))
