"""--backends URL,...: a fixed fleet, each URL its own member."""

from __future__ import annotations

from collections.abc import Sequence

from prefixroute.front.membership.base import ApplyFleet
from prefixroute.routing.fleet import Fleet


class StaticSource:
    def __init__(self, urls: Sequence[str], virtual_nodes: int) -> None:
        self.fleet = Fleet.from_urls(urls, virtual_nodes)

    async def start(self, apply: ApplyFleet) -> None:
        apply(self.fleet)

    async def stop(self) -> None:
        return None
