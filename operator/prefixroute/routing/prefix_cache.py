"""prefix-cache (the default): send each request where the most of its prefix is cached,
unless that member's queue would cost more than the prefill it saves.

For every member within the bounded-load limit the cost of sending there is

    uncached units (prompt units minus matched blocks x block size)
  + queue_penalty x prefill queued there (in prompt units)

— an estimate of the time to this request's first token, in units of prefill
work: its own uncached prompt plus the prefill of the requests ahead of it.
The queue is the router's own count of uncached units of requests that have
not sent a first byte yet (a request that is decoding hardly delays a new
prefill) or, when larger, the engine's scraped waiting requests x the mean
prompt length (other routers' traffic).
The cheapest member wins; ties go to the earlier member on the ring walk from
the request's key, so router instances with the same view agree. When no
member within the limit holds any of the prefix, the request is a miss and
follows the bounded-load ring walk (prefix-hash), which spreads misses evenly
and makes the next request with that prefix land in the same place.

Why this avoids the classic failures:
- a system prompt shared by every request gives its first holder an advantage
  worth only the shared part; once that member's queue costs more (or it hits
  the load bound) others take requests and learn the system prompt too;
- a miss never goes to a member above the load bound;
- a hot member loses only the requests it cannot take; every other prefix
  keeps its own affinity (no global switch to shortest-queue).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from prefixroute.routing.beliefs import CacheBeliefs
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.prefix_hash import bounded_walk
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates, member_bounds, within_bound

_MEAN_WEIGHT = 0.05  # EWMA weight of the newest request in the mean prompt length


class PrefixCache(StrategyBase):
    name = "prefix-cache"

    def __init__(self, config: RoutingConfig) -> None:
        self.block_size = config.block_size
        self.load_factor = config.load_factor
        self.load_slack = config.load_slack
        self.queue_penalty = config.queue_penalty
        # Routing history, and the engines' own KV events where they are followed (precise mode).
        self.index = CacheBeliefs(config.index_blocks_per_member)
        self._mean_units: float | None = None

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        members = candidates(fleet, exclude)
        loads = {m.name: load.get(m.name).requests for m in members}
        bounds = member_bounds(members, loads, self.load_factor, self.load_slack)
        mean_units = self._mean_units if self._mean_units is not None else float(request.units)
        rank = fleet.ring.rank(request.key)
        best: tuple[float, int] | None = None
        chosen: Member | None = None
        any_match = False
        for member in members:
            if not within_bound(loads[member.name], bounds[member.name]):
                continue
            matched = self.index.matched(member.name, request.blocks)
            any_match = any_match or matched > 0
            member_load = load.get(member.name)
            queued = max(member_load.prefill_units, member_load.engine_waiting * mean_units)
            score = (request.units - matched * self.block_size + self.queue_penalty * queued, rank.get(member.name, 0))
            if best is None or score < best:
                best, chosen = score, member
        if not any_match or chosen is None:
            return bounded_walk(request.key, fleet, load, exclude, self.load_factor, self.load_slack)
        return chosen

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        self.index.routed(member.name, request.blocks)
        if self._mean_units is None:
            self._mean_units = float(request.units)
        else:
            self._mean_units += _MEAN_WEIGHT * (request.units - self._mean_units)

    def on_complete(self, request: RoutingRequest, member: Member, ok: bool) -> None:
        self.index.completed(member.name, request.blocks)

    def on_member_removed(self, name: str) -> None:
        self.index.forget(name)

    def on_blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        self.index.blocks_stored(member, keys)

    def on_blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        self.index.blocks_removed(member, keys)

    def on_cache_cleared(self, member: str) -> None:
        self.index.cache_cleared(member)

    def on_precise(self, member: str, precise: bool) -> None:
        self.index.set_precise(member, precise)

    def matched_blocks(self, request: RoutingRequest, member: Member) -> int:
        """Blocks of `request` believed cached on `member` (for metrics: the prefix match ratio)."""
        return self.index.matched(member.name, request.blocks)

    def index_blocks(self) -> dict[str, int]:
        return self.index.sizes()
