"""The one interface every routing strategy implements.

`select` picks a member for a request from a fleet under a load view; the hooks
let a strategy learn (prefix-cache records what it routed) and forget members.
Strategies are built only by `factory.make_strategy`, and callers never reach
past this interface into a strategy's internals.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest


class Strategy(Protocol):
    name: str

    def select(self, request: RoutingRequest, fleet: Fleet, load: LoadTracker, exclude: Collection[str] = ()) -> Member:
        """The member to send `request` to; members named in `exclude` (already tried) are skipped.

        Raises NoMemberAvailable when no routable member is left."""
        ...

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        """The request is being sent to `member` (learn now, so that concurrent requests
        with the same prefix already see it there)."""
        ...

    def on_complete(self, request: RoutingRequest, member: Member, ok: bool) -> None:
        """The member finished the request, successfully or not."""
        ...

    def on_member_removed(self, name: str) -> None:
        """The member left the fleet for good; drop what was learned about it."""
        ...

    def on_peer_routed(self, request: RoutingRequest, member: str, fleet: Fleet) -> None:
        """Another router replica sent `request` to `member` (one of `fleet`): learn from it as
        from this router's own traffic (routing.peers)."""
        ...

    def on_peer_ended(self, request: RoutingRequest, member: str) -> None:
        """That request is over (its replica said so, or fell silent)."""
        ...

    def matched_blocks(self, request: RoutingRequest, member: Member) -> int | None:
        """Leading blocks of `request` the strategy believes `member` holds, or None when
        it keeps no such belief (only prefix-cache does). Read before `on_routed`; the
        router's prefix-match-ratio metric comes from it."""
        ...

    def index_blocks(self) -> Mapping[str, int] | None:
        """Blocks the strategy remembers per member, or None when it keeps no index (only
        prefix-cache does). The router exports it, so its memory bound can be watched."""
        ...

    def adapter_resident(self, request: RoutingRequest, member: Member) -> bool | None:
        """Whether the strategy believes `request`'s adapter is in one of `member`'s slots, or
        None for a base-model request or a strategy that keeps no such belief (only prefix-cache
        with --adapter-slots does). Read before `on_routed`; the fronts' adapter metric uses it."""
        ...

    def on_engine_adapters(self, member: str, adapters: Collection[str]) -> None:
        """The member's engine reports these adapters running or waiting (its scraped
        `vllm:lora_requests_info`)."""
        ...

    # Precise mode: what the member's engine itself reports (its KV cache events, in our
    # block keys; see routing.kv_stream). Strategies that keep no index ignore them.

    def on_blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        """The member's engine cached these blocks."""
        ...

    def on_blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        """The member's engine evicted these blocks."""
        ...

    def on_cache_cleared(self, member: str) -> None:
        """The member's engine holds nothing now (a reset, a restart, or a view we lost)."""
        ...

    def on_precise(self, member: str, precise: bool) -> None:
        """Whether the member's events can be trusted now; when not, route it from history."""
        ...


class StrategyBase:
    """No-op hooks, so a strategy implements only what it needs."""

    name = "base"

    def on_routed(self, request: RoutingRequest, member: Member) -> None:
        return None

    def on_complete(self, request: RoutingRequest, member: Member, ok: bool) -> None:
        return None

    def on_member_removed(self, name: str) -> None:
        return None

    def on_peer_routed(self, request: RoutingRequest, member: str, fleet: Fleet) -> None:
        return None

    def on_peer_ended(self, request: RoutingRequest, member: str) -> None:
        return None

    def matched_blocks(self, request: RoutingRequest, member: Member) -> int | None:
        return None

    def index_blocks(self) -> Mapping[str, int] | None:
        return None

    def adapter_resident(self, request: RoutingRequest, member: Member) -> bool | None:
        return None

    def on_engine_adapters(self, member: str, adapters: Collection[str]) -> None:
        return None

    def on_blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        return None

    def on_blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        return None

    def on_cache_cleared(self, member: str) -> None:
        return None

    def on_precise(self, member: str, precise: bool) -> None:
        return None


def candidates(fleet: Fleet, exclude: Collection[str]) -> list[Member]:
    """Routable members not excluded, or NoMemberAvailable."""
    found = [m for m in fleet.routable if m.name not in exclude]
    if not found:
        raise NoMemberAvailable("no ready member is left to take the request")
    return found


def load_bound(
    total_requests: float, members: int, load_factor: float, share: float | None = None, slack: int = 0
) -> float:
    """The most requests one member may hold once this request is placed (CHWBL).

    The bound is load_factor x the member's fair share, but never less than the
    fair share plus `slack` requests: at low load the fair share is below one
    request, and a purely relative bound would then refuse a second request to
    the member that holds its prefix (a replica serves many sequences at once).
    The incoming request counts as +1 in the total, so with equal weights the
    least loaded member always fits and a bounded-load walk never comes up
    empty. `share` is the member's weight over the sum of weights (1/members
    when weights are equal): a member at half weight — cooling a hot spot, or
    slow-starting after it joined — may hold half as much."""
    fair = (total_requests + 1) * (share if share is not None else 1.0 / members)
    return max(1.0, -(-fair * load_factor // 1), -(-fair // 1) + slack)


def within_bound(member_load: float, bound: float) -> bool:
    return member_load + 1 <= bound


def member_bounds(
    members: Sequence[Member], loads: Mapping[str, float], load_factor: float, slack: int = 0
) -> dict[str, float]:
    """Each member's weighted load bound for the next request."""
    total = sum(loads[m.name] for m in members)
    weight_sum = sum(m.weight for m in members)
    return {m.name: load_bound(total, len(members), load_factor, m.weight / weight_sum, slack) for m in members}


class LoadBounds:
    """Each member's bounded-load limit for the next request, asked for one member at a time.

    The same numbers as `member_bounds` over the routable members not excluded, but
    O(1) per member asked: the load view keeps the fleet's total (`total_requests`)
    and the fleet its weight sum, and only the few excluded members are subtracted.
    A decision that looks at a handful of members then costs the same in a fleet of
    8 or of 1,024. Raises NoMemberAvailable when every routable member is excluded."""

    __slots__ = ("_by_weight", "count", "doubt", "fleet", "load", "load_factor", "slack", "total", "weight_sum")

    def __init__(
        self, fleet: Fleet, load: LoadTracker, exclude: Collection[str], load_factor: float, slack: int = 0
    ) -> None:
        names = fleet.ring.names
        total = load.total_requests(names)
        count = len(fleet.routable)
        weight_sum = fleet.weight_sum
        for name in exclude:
            if name in names:
                total -= load.get(name).requests
                count -= 1
                weight_sum -= fleet.by_name[name].weight
        if count <= 0:
            raise NoMemberAvailable("no ready member is left to take the request")
        self.fleet, self.load, self.load_factor, self.slack = fleet, load, load_factor, slack
        self.total, self.count, self.weight_sum = total, count, weight_sum
        self.doubt = load.peer_doubt
        self._by_weight: dict[float, float] = {}  # bound per member weight (usually one weight for all)

    def bound(self, name: str) -> float:
        weight = self.fleet.by_name[name].weight
        bound = self._by_weight.get(weight)
        if bound is None:
            share = weight / self.weight_sum
            bound = self._by_weight[weight] = load_bound(self.total, self.count, self.load_factor, share, self.slack)
        return bound

    def fits(self, name: str) -> bool:
        """Whether `name` (a routable member) stays within its bound with one more request.

        A member whose count is the routers' and includes peers' requests (other router
        replicas' reports) may go over by the tracker's `peer_doubt` (1): those counts are a
        report late (the report interval and the network), so a peer's request that has ended
        may still count here, and that one phantom request would turn the prompt's warm member
        away when it sits at its bound. (The engine's own scraped count, when larger, is not
        late in that way: no doubt.) With peers, TTFT p99 was above one router's in 29 of 78
        simulated cells without this and in 9 with it (docs/benchmarks.md, router replicas
        that agree)."""
        bound = self._by_weight.get(self.fleet.by_name[name].weight)  # `bound`, without its call when known
        if bound is None:
            bound = self.bound(name)
        load = self.load.get(name)
        requests = load.requests
        if load.peer_in_flight and requests == load.in_flight + load.peer_in_flight:
            return requests + 1 - self.doubt <= bound
        return requests + 1 <= bound


def least_relative_load(members: Sequence[Member], loads: Mapping[str, float]) -> Member:
    """The member with the most room for its weight: the fallback when every member is at its bound."""
    return min(members, key=lambda m: (loads[m.name] + 1) / m.weight)
