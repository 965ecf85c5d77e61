"""prefix-cache (the default): send each request where the most of its prefix is cached,
unless that member's queue would cost more than the prefill it saves.

The cost of sending a request to member m, in prompt units of prefill work:

    uncached(m) + queue_penalty x queued(m)

uncached(m) is the prompt minus the blocks m is believed to hold; queued(m) is
the prefill waiting there ahead of this request (this router's uncached units
with no first byte yet, or, when larger, the engine's scraped waiting requests x
the mean prompt length). Read as a cost to the fleet: with penalty p, ranking by
it is ranking by

    queued(m) + uncached(m)  +  (1/p - 1) x redo(m)

— this request's time to first token (the queue ahead plus its own prefill),
plus the prefill that must be redone because m is not the member holding the
longest prefix (redo(m) = the warmest candidate's match minus m's, GPU work that
delays whoever queues behind it and that the request's own TTFT does not see).
At the default p = 0.4 the redone prefill counts one and a half times more, so a
conversation leaves its warm member only when the queue there costs more than 2.5
times the history it would recompute elsewhere.

Which members are scored: never the whole fleet. The prefix index hands back
the members holding the deepest blocks of the prompt (at most `_HOLDERS`; a
prefix held by more members than that is one nearly everyone shares and ranks
no one), and the first `_CHOICES` members within their load bound on the ring
walk from the request's affinity key (which skips a prefix nearly all traffic
shares: `affinity_key`) join them — a few load-based candidates, the same ones
for every turn of a conversation, so where it spills is stable too. A decision
costs about the same in a fleet of 8 or 1,024 members. In fleets of up to
`_HOLDERS` members every member is scored, and every member is a ring candidate.

Members over the bounded-load limit are not candidates. The cheapest candidate
wins; equal costs go to the earlier on the ring walk from the affinity key, so
router replicas with the same view agree.

A miss (no candidate holds any block of the prompt) follows the ring walk from
the affinity key: the first candidate within its bound takes it — every router
replica computes the same walk, so replicas that learn only from their own
share of the traffic still send a new prefix to the same member, and the next
request with it, through any replica, finds it there — unless that member's
queue is longer than the shortest candidate's by more than this prompt's whole
prefill (waiting there would cost more than computing it all elsewhere); then
the next candidate on the walk within that margin takes it. Placing misses on
the least loaded candidate by each replica's own load view nearly halved the
hit rate with 2 router replicas on the Mooncake trace (docs/benchmarks.md).
When every candidate is followed precisely (engines' KV events), the least
loaded takes it after all — least prefill queued, fewest requests, fewest
blocks stored (so at low load, when every member is idle, distinct new
prefixes spread over the members rather than follow the hash's variance), then
ring order: every replica learns from the engines where the prefix went, so
replicas need not agree beforehand, and on the Mooncake trace the ring walk
(or the fewest blocks stored) cost precise mode 0.9 points of hit rate with
one router and gained nothing with two.

A request for a LoRA adapter A (with `adapter_slots` set: the engines' max_loras) adds to
a member's cost the price of loading A there, `adapter_load_cost` prompt units, where A
is not believed resident (routing.adapter_residency): a member whose slots hold A saves
that load as a cached block saves its prefill. Members believed to hold A join the
scored candidates (at most `_ADAPTER_HOLDERS`, the most recent), and a miss for A is placed by
the same cost rather than by the ring walk, so a new conversation for A goes where A is
loaded unless the queue there outweighs the load. Without `adapter_slots` (0) there is
no such belief and no such cost: adapters only salt the keys, as they did before.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from prefixroute.routing.adapter_residency import AdapterResidency, load_cost
from prefixroute.routing.affinity_key import AffinityKeys
from prefixroute.routing.beliefs import CacheBeliefs
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import LoadBounds, StrategyBase, candidates, least_relative_load

_MEAN_WEIGHT = 0.05  # EWMA weight of the newest request in the mean prompt length
_HOLDERS = 8  # members holding the deepest prefix that are scored
_CHOICES = 2  # members from the ring walk that are scored too
# Members a request's adapter was last sent to that are scored too: each costs a walk of the
# prompt's blocks in the index, and the most recent are the likeliest to hold it still.
_ADAPTER_HOLDERS = 2


def _queued(load: LoadTracker, name: str, mean_units: float) -> float:
    """Prefill queued at `name`, in prompt units: the routers' without a first byte (ours and
    our peers'), or the engine's waiting requests."""
    member_load = load.get(name)
    return max(float(member_load.queued_prefill), member_load.engine_waiting * mean_units)


class PrefixCache(StrategyBase):
    name = "prefix-cache"

    def __init__(self, config: RoutingConfig) -> None:
        self.block_size = config.block_size
        self.load_factor = config.load_factor
        self.load_slack = config.load_slack
        self.queue_penalty = config.queue_penalty
        # Routing history, and the engines' own KV events where they are followed (precise mode).
        self.index = CacheBeliefs(config.index_blocks_per_member)
        self.keys = AffinityKeys(config.prefix_blocks, config.load_factor)
        self._mean_units: float | None = None
        # Adapters believed in each member's slots (None: --adapter-slots 0, no belief, no cost).
        self.residency = AdapterResidency(config.adapter_slots) if config.adapter_slots else None
        self.adapter_load_cost = load_cost(config)
        self._last: tuple[RoutingRequest | None, dict[str, int]] = (None, {})  # matches of the last select

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        bounds = LoadBounds(fleet, load, exclude, self.load_factor, self.load_slack)
        key = self.keys.key(request, len(fleet.routable))
        choices = self._ring_choices(key, fleet, bounds, exclude)
        if not choices:  # every member is over its bound (unequal weights can do that)
            members = candidates(fleet, exclude)
            return least_relative_load(members, {m.name: load.get(m.name).requests for m in members})
        scored = self._candidates(request, fleet, bounds, exclude, choices)
        residency = self.residency if request.adapter is not None else None
        if residency is not None:
            self._add_holders(residency, request, fleet, bounds, exclude, scored)
        self._last = (request, scored)
        mean_units = self._mean_units if self._mean_units is not None else float(request.units)
        if max(scored.values()) == 0 and residency is None:
            return fleet.by_name[self._place_miss(choices, load, mean_units, request.units)]
        # The cheapest and those tied with it in one pass (`_queued` inlined: this loop is on
        # every decision's path).
        units, size, penalty, get = request.units, self.block_size, self.queue_penalty, load.get
        adapter, loading = request.adapter or "", self.adapter_load_cost
        cheapest = math.inf
        tied: list[str] = []
        for name, depth in scored.items():
            member_load = get(name)
            # max(routers', engine's) written out: a builtin call saved per candidate
            queued = float(member_load.prefill_units + member_load.peer_prefill)
            engine_queued = member_load.engine_waiting * mean_units
            if engine_queued > queued:
                queued = engine_queued
            cost = units - depth * size + penalty * queued
            if residency is not None and not residency.believed(name, adapter):
                cost += loading
            if cost < cheapest:
                cheapest, tied = cost, [name]
            elif cost == cheapest:
                tied.append(name)
        if len(tied) > 1:
            ring = fleet.ring
            tied.sort(key=lambda name: (ring.distance(key, name), name))
        return fleet.by_name[tied[0]]

    @staticmethod
    def _ring_choices(key: int, fleet: Fleet, bounds: LoadBounds, exclude: Collection[str]) -> list[str]:
        """The first `_CHOICES` members within their bound on the ring walk from `key` (in a
        small fleet, all of them, in that order)."""
        wanted = _CHOICES if len(fleet.routable) > _HOLDERS else _HOLDERS
        choices: list[str] = []
        fits = bounds.fits
        found = 0  # len(choices), counted: no len() call per choice on every decision
        for name in fleet.ring.walk(key):
            if name not in exclude and fits(name):
                choices.append(name)
                found += 1
                if found == wanted:
                    break
        return choices

    def _candidates(
        self, request: RoutingRequest, fleet: Fleet, bounds: LoadBounds, exclude: Collection[str], choices: list[str]
    ) -> dict[str, int]:
        """{member: blocks of the prompt it holds} for the members to score, all within their bound."""
        index, blocks = self.index, request.blocks
        if len(fleet.routable) <= _HOLDERS:
            # A small fleet: everyone within its bound, which is what `choices` holds already (the
            # ring walk meets every routable member); the order is the walk's, and no decision
            # reads it (ties go by ring distance).
            return {name: index.matched(name, blocks) for name in choices}
        routable = fleet.ring.names
        scored = {
            name: depth
            for name, depth in index.matches(blocks, _HOLDERS).items()
            if name in routable and name not in exclude and bounds.fits(name)
        }
        for name in choices:
            if name not in scored:
                scored[name] = index.matched(name, blocks)
        return scored

    def _add_holders(
        self,
        residency: AdapterResidency,
        request: RoutingRequest,
        fleet: Fleet,
        bounds: LoadBounds,
        exclude: Collection[str],
        scored: dict[str, int],
    ) -> None:
        """Score the members the request's adapter was last sent to as well (a large fleet's
        candidates are only the prefix's holders and the ring's choices)."""
        if len(fleet.routable) <= _HOLDERS or request.adapter is None:
            return  # a small fleet's candidates are every member within its bound already
        routable = fleet.ring.names
        for name in residency.holders(request.adapter, _ADAPTER_HOLDERS):
            if name not in scored and name in routable and name not in exclude and bounds.fits(name):
                scored[name] = self.index.matched(name, request.blocks)

    def _place_miss(self, choices: list[str], load: LoadTracker, mean_units: float, units: int) -> str:
        """Approximate: the first ring candidate whose queue is not longer than the shortest
        one's by more than this whole prompt's prefill. Precise (every candidate): the least
        loaded — least prefill queued, fewest requests, fewest blocks stored, ring order."""
        queued = [_queued(load, name, mean_units) for name in choices]
        if all(self.index.is_precise(name) for name in choices):
            stored = self.index.stored

            def loaded(position: int) -> tuple[float, float, int, int]:
                name = choices[position]
                return (queued[position], load.get(name).requests, stored.size(name), position)

            return choices[min(range(len(choices)), key=loaded)]
        shortest = min(queued)
        return next(name for name, q in zip(choices, queued) if q - shortest <= units)

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        last, scored = self._last
        self._last = (None, {})  # what select found is out of date once the index learns this request
        self.index.routed(member.name, request.blocks, scored.get(member.name) if last is request else None)
        if self.residency is not None and request.adapter is not None:
            self.residency.routed(member.name, request.adapter)
        self.keys.learn(request)
        if self._mean_units is None:
            self._mean_units = float(request.units)
        else:
            self._mean_units += _MEAN_WEIGHT * (request.units - self._mean_units)

    def on_complete(self, request: RoutingRequest, member: Member, ok: bool) -> None:
        self.index.completed(member.name, request.blocks)

    def on_peer_routed(self, request: RoutingRequest, member: str, fleet: Fleet) -> None:
        self.index.routed(member, request.blocks)  # history, and in flight where the member is precise
        if self.residency is not None and request.adapter is not None:
            self.residency.routed(member, request.adapter)
        self.keys.learn_elsewhere(request, len(fleet.routable))

    def on_peer_ended(self, request: RoutingRequest, member: str) -> None:
        self.index.completed(member, request.blocks)

    def on_member_removed(self, name: str) -> None:
        self.index.forget(name)
        if self.residency is not None:
            self.residency.forget(name)

    def adapter_resident(self, request: RoutingRequest, member: Member) -> bool | None:
        if self.residency is None or request.adapter is None:
            return None
        return self.residency.believed(member.name, request.adapter)

    def on_engine_adapters(self, member: str, adapters: Collection[str]) -> None:
        if self.residency is not None:
            self.residency.engine_reports(member, adapters)

    def on_blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        self.index.blocks_stored(member, keys)

    def on_blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        self.index.blocks_removed(member, keys)

    def on_cache_cleared(self, member: str) -> None:
        self.index.cache_cleared(member)

    def on_precise(self, member: str, precise: bool) -> None:
        self.index.set_precise(member, precise)

    def matched_blocks(self, request: RoutingRequest, member: Member) -> int:
        """Blocks of `request` believed cached on `member` (for metrics: the prefix match ratio);
        between select and on_routed, what select found."""
        last, scored = self._last
        if last is request and member.name in scored:
            return scored[member.name]
        return self.index.matched(member.name, request.blocks)

    def index_blocks(self) -> dict[str, int]:
        return self.index.sizes()
