"""Small builders shared by the routing core tests."""

import math
from dataclasses import replace
from typing import Any

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest, routing_request
from prefixroute.routing.strategy import Strategy

SMALL_BLOCKS = RoutingConfig(block_size=16, prefix_blocks=2)


def text_request(text: str, config: RoutingConfig = SMALL_BLOCKS, tenant: str | None = None) -> RoutingRequest:
    return routing_request(text, config, tenant)


def fleet_of(n: int, **weights: float) -> Fleet:
    return Fleet(tuple(Member(f"m{i}", f"http://m{i}", weights.get(f"m{i}", 1.0)) for i in range(n)))


def strategy(name: str, **overrides: Any) -> Strategy:
    """A strategy built the only way fronts build one (the factory), over SMALL_BLOCKS."""
    return make_strategy(replace(SMALL_BLOCKS, strategy=name, **overrides))


def expected_bound(total_after: int, members: int, factor: float, slack: int) -> int:
    """The bounded-load limit with equal weights, recomputed here from its definition."""
    fair = total_after / members
    return max(1, math.ceil(fair * factor), math.ceil(fair) + slack)


def route(s: Strategy, request: RoutingRequest, fleet: Fleet, load: LoadTracker, hold: bool = True) -> Member:
    """One decision as a front makes it: select, let the strategy learn, and (with `hold`)
    count the request in flight until the test ends it."""
    member = s.select(request, fleet, load)
    s.on_routed(request, member)
    if hold:
        load.begin(member.name, request.units)
    return member


LONG_SHARED = "every request starts with this product's long system prompt; " * 8  # 31 blocks of 16


def sessions_on(
    s: Strategy, fleet: Fleet, load: LoadTracker, sessions: int, turns: int, hold: bool = False
) -> dict[int, list[str]]:
    """Route `sessions` conversations behind LONG_SHARED turn by turn (all first turns, then
    all second turns...): the members each conversation's turns went to."""
    placed: dict[int, list[str]] = {i: [] for i in range(sessions)}
    for turn in range(turns):
        for i in range(sessions):
            history = "".join(f" question {i}.{t} of conversation {i} answer {t}" for t in range(turn + 1))
            placed[i].append(route(s, text_request(LONG_SHARED + history), fleet, load, hold=hold).name)
    return placed
