"""The contract every strategy keeps (`Strategy`), and the bounded-load arithmetic the
strategies share: `load_bound`, `LoadBounds`, `candidates`, `least_relative_load`."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixroute.routing.config import STRATEGY_NAMES
from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.strategy import (
    LoadBounds,
    candidates,
    least_relative_load,
    load_bound,
    member_bounds,
    within_bound,
)
from tests.routing.helpers import fleet_of, route, strategy, text_request

# --- what every strategy must do ------------------------------------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_skips_excluded_and_unready_members(name, load):
    s = strategy(name)
    fleet = Fleet((Member("a", "http://a"), Member("b", "http://b"), Member("c", "http://c", ready=False)))
    for i in range(20):
        assert s.select(text_request(f"prompt {i} " * 5), fleet, load, exclude={"a"}).name == "b"
    with pytest.raises(NoMemberAvailable):
        s.select(text_request("x" * 40), fleet, load, exclude={"a", "b"})


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_skips_draining_members(name, load):
    s = strategy(name)
    fleet = fleet_of(3, m1=0.0)
    chosen = {s.select(text_request(f"p{i}" * 20), fleet, load).name for i in range(50)}
    assert "m1" not in chosen


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_two_router_instances_with_the_same_history_agree(name):
    a, b = strategy(name), strategy(name)
    load_a, load_b = LoadTracker(), LoadTracker()
    fleet = fleet_of(5)
    rng = random.Random(3)
    prompts = [f"system {rng.randrange(6)} " * 8 + f"user {rng.randrange(50)}" for _ in range(300)]
    for p in prompts:
        req = text_request(p)
        assert route(a, req, fleet, load_a).name == route(b, req, fleet, load_b).name


@pytest.mark.parametrize("name", ["prefix-hash", "prefix-cache"])
def test_a_member_at_half_weight_holds_about_half_its_share(name):
    # How the autoscaler cools a hot spot and slow-starts a cold replica.
    s, fleet, load = strategy(name, load_factor=1.0, load_slack=0), fleet_of(4, m0=0.5), LoadTracker()
    hot = text_request("one very hot prefix " * 4)
    for _ in range(70):
        member = s.select(hot, fleet, load)
        s.on_routed(hot, member)
        load.begin(member.name, hot.units)
    counts = {m.name: load.get(m.name).in_flight for m in fleet.members}
    assert counts["m0"] <= math.ceil(71 * 0.5 / 3.5)
    assert all(counts[f"m{i}"] >= 15 for i in (1, 2, 3))


# --- the bound ----------------------------------------------------------------------------


@given(st.lists(st.integers(0, 50), min_size=1, max_size=16), st.floats(1.0, 3.0))
def test_the_least_loaded_member_always_fits_the_bound(loads, factor):
    bound = load_bound(sum(loads), len(loads), factor)
    assert within_bound(min(loads), bound)


@pytest.mark.parametrize(
    ("total", "members", "factor", "share", "slack", "bound"),
    [
        (0, 4, 1.25, None, 0, 1),  # an idle fleet: one request each
        (7, 4, 1.0, None, 0, 2),  # fair share (7 + 1) / 4
        (7, 4, 1.25, None, 0, 3),  # 2 x 1.25, rounded up
        (7, 4, 1.25, None, 3, 5),  # the slack beats the factor at low load
        (99, 8, 1.25, None, 2, 16),  # the factor beats the slack at high load: 12.5 x 1.25
        (11, 4, 1.0, 0.5, 0, 6),  # a member with half the fleet's weight takes half
        (11, 4, 2.0, 0.125, 0, 3),  # 12 x 0.125 = 1.5, x 2
    ],
)
def test_load_bound(total, members, factor, share, slack, bound):
    assert load_bound(total, members, factor, share, slack) == bound


@pytest.mark.parametrize(("member_load", "bound", "fits"), [(0, 1, True), (1, 1, False), (2, 3, True), (3, 3, False)])
def test_within_bound_counts_the_incoming_request(member_load, bound, fits):
    assert within_bound(member_load, bound) is fits


WEIGHTS = (0.25, 0.5, 1.0, 2.0)  # exact in binary: a sum in any order is the same number


@pytest.mark.parametrize("seed", range(40))
def test_load_bounds_agree_with_member_bounds_over_the_candidates(seed):
    """LoadBounds answers per member in O(1) from the tracker's running total; it must give
    the figure member_bounds recounts over the routable members that are not excluded."""
    rng = random.Random(seed)
    members = tuple(
        Member(f"m{i}", f"http://m{i}", rng.choice((0.0, *WEIGHTS)), ready=rng.random() > 0.15) for i in range(8)
    )
    if not any(m.ready and m.weight > 0 for m in members):
        members = (Member("spare", "http://spare"), *members)
    fleet, load = Fleet(members), LoadTracker()
    for _ in range(rng.randrange(40)):
        load.begin(rng.choice(members).name, 10)
    routable = [m.name for m in fleet.routable]
    exclude = set(rng.sample(routable, rng.randrange(len(routable))))
    factor, slack = rng.choice((1.0, 1.25, 2.0)), rng.choice((0, 3))

    bounds = LoadBounds(fleet, load, exclude, factor, slack)
    left = candidates(fleet, exclude)
    loads = {m.name: load.get(m.name).requests for m in left}
    expected = member_bounds(left, loads, factor, slack)
    for m in left:
        assert bounds.bound(m.name) == expected[m.name], m.name
        assert bounds.fits(m.name) is within_bound(loads[m.name], expected[m.name]), m.name


def test_load_bounds_follow_the_tracker_between_decisions():
    fleet, load = fleet_of(2), LoadTracker()
    assert LoadBounds(fleet, load, (), 1.0).fits("m0")
    load.begin("m0", 1)
    load.begin("m0", 1)
    bounds = LoadBounds(fleet, load, (), 1.0)  # 3 requests with this one over 2: at most 2 each
    assert (bounds.fits("m0"), bounds.fits("m1")) == (False, True)


def test_a_member_counted_with_peers_requests_may_go_one_over_its_bound():
    """Peers' counts arrive a report late: one of their requests may have ended already. A
    member whose count includes them is given that one request of doubt; one counted by this
    router alone is not."""
    fleet = fleet_of(2)
    alone, shared = LoadTracker(), LoadTracker()
    for _ in range(2):
        alone.begin("m0", 1)
    shared.begin("m0", 1)
    shared.set_peers("m0", 1, 1, 0)  # the same two requests, one of them a peer's
    for load in (alone, shared):
        assert load.get("m0").requests == 2
    assert not LoadBounds(fleet, alone, (), 1.0).fits("m0")  # 3 over 2: at most 2 each
    assert LoadBounds(fleet, shared, (), 1.0).fits("m0")
    shared.peer_doubt = 0  # reports that arrive as they leave (the simulator without delay)
    assert not LoadBounds(fleet, shared, (), 1.0).fits("m0")
    shared.peer_doubt = 1
    shared.set_peers("m0", 2, 2, 0)  # two of a peer's: still only one of doubt
    assert not LoadBounds(fleet, shared, (), 1.0).fits("m0")
    assert LoadBounds(fleet, shared, (), 1.0).fits("m1")
    scraped = LoadTracker()  # the engine's own count is the larger: it is not late, no doubt
    scraped.set_peers("m0", 1, 1, 0)
    scraped.report_engine("m0", waiting=1.0, running=1.0, kv_usage=0.0)
    assert scraped.get("m0").requests == 2
    assert not LoadBounds(fleet, scraped, (), 1.0).fits("m0")


def test_load_bounds_refuse_a_decision_with_every_member_excluded():
    with pytest.raises(NoMemberAvailable, match="no ready member is left"):
        LoadBounds(fleet_of(2), LoadTracker(), {"m0", "m1"}, 1.25)


# --- candidates and the fallback -------------------------------------------------------------


def test_candidates_are_the_routable_members_not_excluded_in_fleet_order():
    fleet = Fleet(
        (
            Member("a", "http://a"),
            Member("b", "http://b", ready=False),
            Member("c", "http://c", weight=0.0),
            Member("d", "http://d"),
            Member("e", "http://e"),
        )
    )
    assert [m.name for m in candidates(fleet, {"d"})] == ["a", "e"]
    with pytest.raises(NoMemberAvailable, match="no ready member is left"):
        candidates(fleet, {"a", "d", "e"})


@pytest.mark.parametrize(
    ("weights", "loads", "chosen"),
    [
        ({"a": 1.0, "b": 1.0}, {"a": 3, "b": 2}, "b"),
        ({"a": 1.0, "b": 2.0}, {"a": 3, "b": 5}, "b"),  # (5 + 1) / 2 = 3 < (3 + 1) / 1
        ({"a": 1.0, "b": 0.5}, {"a": 2, "b": 1}, "a"),  # (2 + 1) / 1 = 3 < (1 + 1) / 0.5
        ({"a": 4.0, "b": 1.0}, {"a": 5, "b": 1}, "a"),  # the request counts: (5 + 1) / 4 < (1 + 1) / 1
        ({"a": 1.0, "b": 1.0}, {"a": 4, "b": 4}, "a"),  # a tie: the first
    ],
)
def test_least_relative_load_is_the_most_room_for_the_weight(weights, loads, chosen):
    members = [Member(name, f"http://{name}", weight) for name, weight in weights.items()]
    assert least_relative_load(members, loads).name == chosen
