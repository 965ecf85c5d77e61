"""least-load: the member with the fewest requests, ties broken by the ring."""

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
        rank = fleet.ring.rank(request.key)
        return min(
            members,
            key=lambda m: (load.get(m.name).requests, load.get(m.name).in_flight_units, rank.get(m.name, 0)),
        )
