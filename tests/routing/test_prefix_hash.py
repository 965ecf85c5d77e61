"""prefix-hash: consistent hashing with bounded loads (CHWBL) on the affinity key."""

from collections import Counter

import pytest

from prefixroute.routing.load import LoadTracker
from prefixroute.routing.prefix_hash import bounded_walk
from tests.routing.helpers import expected_bound, fleet_of, sessions_on, strategy, text_request


def test_prefix_hash_keys_on_the_first_k_blocks(load):
    s, fleet = strategy("prefix-hash"), fleet_of(8)
    head = "H" * 32  # exactly K=2 blocks of 16
    owners = {s.select(text_request(head + f" tail {i}" * 4), fleet, load).name for i in range(30)}
    assert len(owners) == 1
    spread = {s.select(text_request(f"{i:04d}" * 8), fleet, load).name for i in range(60)}
    assert len(spread) >= 6


@pytest.mark.parametrize(("factor", "slack"), [(1.0, 0), (1.25, 0), (2.0, 0), (1.25, 3)])
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


def test_bounded_walk_passes_excluded_and_full_members_in_ring_order():
    fleet, load = fleet_of(6), LoadTracker()
    key = text_request("a key of its own " * 3).key
    walk = list(fleet.ring.walk(key))
    assert bounded_walk(key, fleet, load, (), 1.0).name == walk[0]
    assert bounded_walk(key, fleet, load, {walk[0]}, 1.0).name == walk[1]
    for _ in range(3):
        load.begin(walk[1], 1)  # 4 with the next, over the 5 members left: a bound of 1 each
    assert bounded_walk(key, fleet, load, {walk[0]}, 1.0).name == walk[2]
    assert bounded_walk(key, fleet, load, {walk[0]}, 1.0, slack=3).name == walk[1]  # 1 + 3 holds 4


def test_prefix_hash_keeps_conversations_apart_behind_a_prefix_everyone_shares():
    s, fleet, load = strategy("prefix-hash"), fleet_of(32), LoadTracker()
    sessions_on(s, fleet, load, 400, 1)  # traffic from which the shared prefix is learned
    placed = sessions_on(s, fleet, load, 200, 4)
    assert all(len(set(members)) == 1 for members in placed.values())  # every turn on one member
    homes = Counter(members[0] for members in placed.values())
    assert len(homes) >= 24  # conversations spread over the fleet, not piled on one key's owner
