"""Yardsticks for the fleet sweep that are not products: a longest-prefix router and one unlimited cache.

`LongestPrefix` is the router a prefix-aware strategy is measured against for
affinity: among the members within the same load bound as prefix-cache's
(`load_factor` x fair share, or fair share + `load_slack`), it sends every
request to the one whose index holds the longest prefix of it, ties going to
the member with the fewest requests in flight (then the earlier on the ring
from a hash of the whole prompt: no member favoured) — and weighs nothing else: no queue, no cost. Without
the bound it would send everything to the first member that learned a prefix
every request shares, for ever. Its index is the routing core's `PrefixIndex`, learned exactly as
prefix-cache learns it (what was sent where, the same cap per member), so the
two differ only in the rule. It scores every member that holds any of the
prompt, which is slow at fleet scale; it is a yardstick, not a product, and is
not in the routing factory.

`unlimited_cache_hit_rate` is the ceiling: the hit rate if one cache without a
size limit served every request in arrival order, counted as the engines count.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from prefixroute.bench.simulate import Prepared
from prefixroute.engine_model.kv_cache import KVCache
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.prefix_index import PrefixIndex
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import StrategyBase, candidates, least_relative_load, member_bounds, within_bound

LONGEST_PREFIX = "longest-prefix"


class LongestPrefix(StrategyBase):
    name = LONGEST_PREFIX

    def __init__(self, config: RoutingConfig) -> None:
        self.index = PrefixIndex(config.index_blocks_per_member)
        self.load_factor = config.load_factor
        self.load_slack = config.load_slack

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        everyone = candidates(fleet, exclude)
        loads = {m.name: load.get(m.name).requests for m in everyone}
        bounds = member_bounds(everyone, loads, self.load_factor, self.load_slack)
        members = {m.name: m for m in everyone if within_bound(loads[m.name], bounds[m.name])}
        if not members:
            return least_relative_load(everyone, loads)
        held = {name: depth for name, depth in self.index.matches(request.blocks).items() if name in members}
        best = max(held.values(), default=0)
        pool = [members[name] for name, depth in held.items() if depth == best] if best else list(members.values())
        ring = fleet.ring
        # Equal loads: the ring from a hash of the whole prompt, i.e. no member favoured.
        return min(pool, key=lambda m: (loads[m.name], ring.distance(request.whole, m.name), m.name))

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        self.index.record(member.name, request.blocks)

    def on_member_removed(self, name: str) -> None:
        self.index.forget(name)

    def matched_blocks(self, request: RoutingRequest, member: Member) -> int:
        return self.index.matched(member.name, request.blocks)


def unlimited_cache_hit_rate(prepared: Sequence[Prepared], block_tokens: int) -> float:
    """Cached prompt tokens / prompt tokens if one cache of unlimited size served every request."""
    cache = KVCache(1 << 62, block_tokens)
    for item in prepared:
        if item.error is None:
            cache.serve(item.blocks, item.prompt_tokens)
    return cache.hits / cache.queries if cache.queries else 0.0
