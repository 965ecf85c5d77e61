"""Step tests for every strategy: who gets each request, and what they must never do."""

import math
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from prefixroute.routing.errors import NoMemberAvailable, UnknownStrategy
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.strategy import load_bound, within_bound
from tests.routing.helpers import SMALL_BLOCKS, fleet_of, text_request


def strategy(name: str, **overrides):
    return make_strategy(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": name, **overrides}))


def route(s, request, fleet, load, hold=True):
    member = s.select(request, fleet, load)
    s.on_routed(request, member)
    if hold:
        load.begin(member.name, request.units)
    return member


# --- shared rules -------------------------------------------------------------------


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


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError):
        RoutingConfig(strategy="random")
    bad = RoutingConfig()
    object.__setattr__(bad, "strategy", "random")
    with pytest.raises(UnknownStrategy):
        make_strategy(bad)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=16), st.floats(1.0, 3.0))
def test_the_least_loaded_member_always_fits_the_bound(loads, factor):
    bound = load_bound(sum(loads), len(loads), factor)
    assert within_bound(min(loads), bound)


# --- baselines ----------------------------------------------------------------------


def test_round_robin_cycles(load):
    s, fleet = strategy("round-robin"), fleet_of(3)
    picks = [s.select(text_request("same"), fleet, load).name for _ in range(6)]
    assert picks == ["m0", "m1", "m2", "m0", "m1", "m2"]


def test_least_load_picks_the_emptiest(load):
    s, fleet = strategy("least-load"), fleet_of(3)
    load.begin("m0", 10)
    load.begin("m1", 10)
    assert s.select(text_request("x" * 40), fleet, load).name == "m2"
    load.report_engine("m2", waiting=4, running=1, kv_usage=0.9)
    assert s.select(text_request("x" * 40), fleet, load).name in {"m0", "m1"}


# --- prefix-hash (CHWBL) ------------------------------------------------------------


def test_prefix_hash_keys_on_the_first_k_blocks(load):
    s, fleet = strategy("prefix-hash"), fleet_of(8)
    head = "H" * 32  # exactly K=2 blocks of 16
    owners = {s.select(text_request(head + f" tail {i}" * 4), fleet, load).name for i in range(30)}
    assert len(owners) == 1
    spread = {s.select(text_request(f"{i:04d}" * 8), fleet, load).name for i in range(60)}
    assert len(spread) >= 6


def expected_bound(total_after, members, factor, slack):
    fair = total_after / members
    return max(1, math.ceil(fair * factor), math.ceil(fair) + slack)


@pytest.mark.parametrize("factor, slack", [(1.0, 0), (1.25, 0), (2.0, 0), (1.25, 3)])
def test_prefix_hash_never_exceeds_the_load_bound(factor, slack, load):
    s, fleet = strategy("prefix-hash", load_factor=factor, load_slack=slack), fleet_of(4)
    hot = text_request("the same hot prefix" * 4)
    for placed in range(60):
        member = s.select(hot, fleet, load)
        assert load.get(member.name).in_flight + 1 <= expected_bound(placed + 1, 4, factor, slack)
        load.begin(member.name, hot.units)
    counts = [load.get(m.name).in_flight for m in fleet.members]
    assert max(counts) <= expected_bound(60, 4, factor, slack)


def test_slack_keeps_affinity_at_low_load(load):
    # One request in flight on 8 members: a relative bound alone (1.25 x 2/8) would be 1
    # and send the second request with the same prefix elsewhere.
    for slack, same in ((0, False), (3, True)):
        s, fleet, tracker = strategy("prefix-hash", load_slack=slack), fleet_of(8), type(load)()
        req = text_request("a session's long shared prefix" * 3)
        first = s.select(req, fleet, tracker)
        tracker.begin(first.name, req.units)
        assert (s.select(req, fleet, tracker).name == first.name) is same


def test_prefix_hash_spills_clockwise_not_randomly(load):
    s, fleet = strategy("prefix-hash", load_factor=1.0, load_slack=0), fleet_of(6)
    req = text_request("k" * 40)
    walk = list(fleet.ring.walk(req.key))
    first = s.select(req, fleet, load)
    assert first.name == walk[0]
    load.begin(first.name, 1)
    assert s.select(req, fleet, load).name == walk[1]


# --- prefix-cache -------------------------------------------------------------------

SYSTEM = "You are a careful assistant for ACME. " * 12  # 456 chars = 28 blocks of 16


def test_prefix_cache_returns_a_prefix_to_the_member_that_holds_it(load):
    s, fleet = strategy("prefix-cache"), fleet_of(6)
    docs = [f"document {d} " * 20 for d in range(6)]
    home = {d: route(s, text_request(docs[d] + "q0"), fleet, load, hold=False).name for d in range(6)}
    for d in range(6):
        for q in range(1, 5):
            assert route(s, text_request(docs[d] + f"question {q}"), fleet, load, hold=False).name == home[d]


def test_a_shared_system_prompt_does_not_pile_onto_one_member():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    in_flight: list = []
    counts: Counter = Counter()
    for i in range(400):
        req = text_request(SYSTEM + f"user question number {i}")
        member = route(s, req, fleet, load)
        counts[member.name] += 1
        in_flight.append((member.name, req.units))
        if len(in_flight) > 12:  # steady concurrency of 12 requests
            name, units = in_flight.pop(0)
            load.end(name, units)
        per_member = [load.get(m.name).in_flight for m in fleet.members]
        assert max(per_member) <= expected_bound(len(in_flight), 4, 1.25, 3)
    assert len(counts) == 4 and min(counts.values()) >= 400 / 4 / 2


def test_a_miss_never_goes_to_an_overloaded_member():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    for _ in range(20):
        load.begin("m0", 100)
    misses = [text_request(f"brand new prompt {i} " * 4) for i in range(200)]
    owned_by_m0 = [r for r in misses if fleet.ring.owner(r.key) == "m0"]
    assert owned_by_m0, "some new prefixes hash to m0"
    for req in owned_by_m0:
        assert s.select(req, fleet, load).name != "m0"


def test_a_hot_member_loses_only_what_it_cannot_take():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    docs = {}
    for d in range(16):
        text = f"tenant document {d} " * 10
        docs[d] = (text, route(s, text_request(text + "warm"), fleet, load, hold=False).name)
    hot = docs[0][1]
    for _ in range(30):
        load.begin(hot, 100)  # the hot member is far over the bound
    for d, (text, home) in docs.items():
        chosen = s.select(text_request(text + "again"), fleet, load).name
        if home == hot:
            assert chosen != hot
        else:
            assert chosen == home, f"document {d} lost its affinity"


def test_queue_cost_outweighs_a_small_cached_prefix(load):
    s, fleet = strategy("prefix-cache", load_factor=10.0), fleet_of(2)
    short_shared = "tiny prefix....."  # one block out of many
    first = route(s, text_request(short_shared + "a" * 300), fleet, load, hold=False)
    for _ in range(3):
        load.begin(first.name, 316)
    other = s.select(text_request(short_shared + "b" * 300), fleet, load)
    assert other.name != first.name


def test_removed_member_is_forgotten(load):
    s, fleet = strategy("prefix-cache"), fleet_of(3)
    text = "remember me " * 10
    home = route(s, text_request(text), fleet, load, hold=False).name
    s.on_member_removed(home)
    smaller = Fleet(tuple(m for m in fleet.members if m.name != home))
    assert s.select(text_request(text), smaller, load).name != home


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


# --- fleet scale: one prefix every request shares ------------------------------------

LONG_SHARED = "every request starts with this product's long system prompt; " * 8  # 31 blocks of 16


def sessions_on(s, fleet, load, sessions: int, turns: int, hold: bool = False) -> dict[int, list[str]]:
    """Route `sessions` conversations turn by turn (all first turns, then all second turns...)."""
    placed: dict[int, list[str]] = {i: [] for i in range(sessions)}
    for turn in range(turns):
        for i in range(sessions):
            history = "".join(f" question {i}.{t} of conversation {i} answer {t}" for t in range(turn + 1))
            placed[i].append(route(s, text_request(LONG_SHARED + history), fleet, load, hold=hold).name)
    return placed


def test_prefix_hash_keeps_conversations_apart_behind_a_prefix_everyone_shares():
    s, fleet, load = strategy("prefix-hash"), fleet_of(32), LoadTracker()
    sessions_on(s, fleet, load, 400, 1)  # traffic from which the shared prefix is learned
    placed = sessions_on(s, fleet, load, 200, 4)
    assert all(len(set(members)) == 1 for members in placed.values())  # every turn on one member
    homes = Counter(members[0] for members in placed.values())
    assert len(homes) >= 24  # conversations spread over the fleet, not piled on one key's owner


def test_prefix_cache_scores_the_holders_and_a_few_ring_candidates_not_the_fleet():
    class Counting(LoadTracker):
        def __init__(self) -> None:
            super().__init__()
            self.read: set[str] = set()

        def get(self, name):
            self.read.add(name)
            return super().get(name)

    s, fleet, load = strategy("prefix-cache"), fleet_of(256), Counting()
    sessions_on(s, fleet, load, 600, 2)
    for i in range(50):
        load.read.clear()
        request = text_request(LONG_SHARED + f" question {i}.0 of conversation {i} answer 0 and more")
        s.select(request, fleet, load)
        assert len(load.read) <= 12  # holders of its deepest blocks, a few ring candidates, the bound walk


def test_distinct_new_prefixes_spread_over_idle_members_followed_precisely():
    # Each request is answered before the next: every member is idle at every decision. With
    # the engines' own view (shared by every router replica) a miss goes to the member whose
    # engine holds the fewest blocks; the ring alone would put several prefixes on one member.
    for seed in range(30):
        counts: Counter = Counter()
        s, fleet, load = strategy("prefix-cache"), fleet_of(3), LoadTracker()
        for m in fleet.members:
            s.on_precise(m.name, True)
        for p in range(6):
            prompt = f"{p}{seed:04d} system prompt number {p} " * 4
            first = route(s, text_request(prompt + "question"), fleet, load, hold=False)
            s.on_blocks_stored(first.name, text_request(prompt + "question").blocks)  # the engine's event
            counts[first.name] += 1
            for q in range(3):  # later requests with it find it where it went
                assert route(s, text_request(prompt + f"another {q}"), fleet, load, hold=False) == first
        assert max(counts.values()) == 2


def test_router_replicas_that_learn_apart_send_a_new_prefix_to_the_same_member():
    # Two replicas with their own load views (a has requests in flight, b none) and their own
    # histories: a miss follows the ring walk from its key, so both place each new prefix alike
    # unless a queue ahead is longer than the new prompt's whole prefill.
    a, b, fleet = strategy("prefix-cache"), strategy("prefix-cache"), fleet_of(8)
    load_a, load_b = LoadTracker(), LoadTracker()
    rng = random.Random(4)
    for i in range(60):
        if i < 16:  # a few requests in flight: within every load bound
            load_a.begin(f"m{rng.randrange(8)}", 200, prefill=rng.randrange(20))
        request = text_request(f"{i:03d} a new prefix nobody has seen " * 3)
        chosen = a.select(request, fleet, load_a)
        assert chosen == b.select(request, fleet, load_b)
        (a if i % 2 else b).on_routed(request, chosen)


def test_a_miss_leaves_its_ring_owner_only_for_a_queue_longer_than_its_own_prefill():
    s, fleet, load = strategy("prefix-cache", load_factor=100.0), fleet_of(3), LoadTracker()
    request = text_request("a prompt nobody holds, " * 4)
    owner = next(iter(fleet.ring.walk(s.keys.key(request, 3))))
    load.begin(owner, request.units, prefill=request.units)  # queued: exactly one such prompt
    assert s.select(request, fleet, load).name == owner
    load.begin(owner, 1, prefill=1)  # a little more than one whole prefill ahead
    assert s.select(request, fleet, load).name != owner


def test_a_miss_among_members_followed_precisely_goes_to_the_least_loaded():
    # The engines tell every replica where a new prefix went, so replicas need not agree
    # beforehand: a queue on the ring owner, however short, sends the miss elsewhere.
    s, fleet, load = strategy("prefix-cache", load_factor=100.0), fleet_of(3), LoadTracker()
    for m in fleet.members:
        s.on_precise(m.name, True)
    request = text_request("a prompt nobody holds, " * 4)
    owner = next(iter(fleet.ring.walk(s.keys.key(request, 3))))
    assert s.select(request, fleet, load).name == owner  # all idle and empty: ring order
    load.begin(owner, 1, prefill=1)
    assert s.select(request, fleet, load).name != owner
