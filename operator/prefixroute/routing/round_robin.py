"""round-robin: the baseline that ignores prefixes and load."""

from __future__ import annotations

from collections.abc import Collection

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates


class RoundRobin(StrategyBase):
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        members = candidates(fleet, exclude)
        member = members[self._next % len(members)]
        self._next += 1
        return member
