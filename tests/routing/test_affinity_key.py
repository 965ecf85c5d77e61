"""The affinity key skips what nearly all traffic shares, and nothing else."""

import random

from prefixroute.routing.affinity_key import SAMPLE, AffinityKeys, SharedPrefixes
from prefixroute.routing.request import RoutingRequest

K = 4


def request(blocks: list[int], whole: int) -> RoutingRequest:
    return RoutingRequest(tuple(blocks), blocks[min(K, len(blocks)) - 1] if blocks else whole, 100, None, whole)


def traffic(sessions: int, turns: int, shared: int, seed: int = 0) -> list[list[RoutingRequest]]:
    """Each session: `shared` blocks everyone has, then its own blocks growing by 3 per turn."""
    rng = random.Random(seed)
    prefix = [rng.getrandbits(64) for _ in range(shared)]
    out = []
    for _ in range(sessions):
        own = [rng.getrandbits(64) for _ in range(3 * turns + 2)]
        out.append([request(prefix + own[: 3 * (t + 1)], rng.getrandbits(64)) for t in range(turns)])
    return out


def feed(keys: AffinityKeys, sessions: list[list[RoutingRequest]], members: int) -> None:
    for turn in range(max(len(s) for s in sessions)):
        for session in sessions:
            if turn < len(session):
                keys.key(session[turn], members)
                keys.learn(session[turn])


def test_a_prefix_every_request_shares_is_skipped_once_learned():
    keys = AffinityKeys(K, 1.25)
    sessions = traffic(400, 6, shared=12)
    first = sessions[0][0]
    assert keys.key(first, 64) == first.key  # nothing learned yet: the plain first-K key
    feed(keys, sessions, 64)
    for session in sessions[:50]:
        own = {keys.key(turn, 64) for turn in session}
        assert own == {session[0].blocks[12]}  # every turn: the first block after the shared 12
    assert len({keys.key(s[0], 64) for s in sessions}) == len(sessions)


def test_what_only_one_conversation_repeats_is_never_shared():
    keys = AffinityKeys(K, 1.25)
    sessions = traffic(300, 16, shared=0)  # no common prefix; each session repeats its own 16 times
    feed(keys, sessions, 1024)
    assert all(keys.key(s[-1], 1024) == s[-1].key for s in sessions)


def test_a_small_fleet_skips_only_what_more_than_a_member_can_take():
    # 8 members: a member's bounded share is 1.25/8; a prefix in 10% of traffic keeps its key.
    keys = AffinityKeys(K, 1.25)
    rng = random.Random(1)
    popular = [rng.getrandbits(64) for _ in range(8)]
    requests = []
    for i in range(20000):
        head = popular if i % 10 == 0 else [rng.getrandbits(64) for _ in range(8)]
        requests.append(request(head + [rng.getrandbits(64) for _ in range(4)], rng.getrandbits(64)))
    for r in requests:
        keys.key(r, 8)
        keys.learn(r)
    hot = request([*popular, 1, 2, 3, 4], 99)
    assert keys.key(hot, 8) == hot.key
    assert keys.key(hot, 256) != hot.key  # with 256 members the same prefix is far over one member's share


def test_nothing_but_shared_blocks_and_a_partial_one_keys_on_the_whole_prompt():
    keys = AffinityKeys(K, 1.25)
    sessions = traffic(400, 3, shared=10)
    feed(keys, sessions, 64)
    short = request(sessions[0][0].blocks[:10], whole=12345)
    assert keys.key(short, 64) == 12345


def test_replicas_that_see_the_same_traffic_compute_the_same_keys():
    a, b = AffinityKeys(K, 1.25), AffinityKeys(K, 1.25)
    sessions = traffic(300, 4, shared=9, seed=5)
    feed(a, sessions, 32)
    feed(b, sessions, 32)
    assert all(a.key(t, 32) == b.key(t, 32) for s in sessions for t in s)


def test_shares_approach_the_fraction_of_traffic_and_memory_stays_bounded():
    shared = SharedPrefixes(window=1000)
    rng = random.Random(2)
    for i in range(20000):
        shared.observe([7, 8] if i % 2 == 0 else [7, rng.getrandbits(64)])
    assert abs(shared.share(7) - 1.0) < 0.01
    assert abs(shared.share(8) - 0.5) < 0.05
    assert len(shared) < 1500  # keys seen once are dropped within about a window
    assert shared.depth([7, 8, 9], 0.6) == 1
    assert shared.depth([7, 8, 9], 0.4) == 2
    assert SAMPLE >= 1


def test_requests_learned_from_peers_count_as_this_router_s_own():
    """Router replicas that share their history learn the same shares as one router would: a
    peer's request is counted to its shared depth, as its own router counted it (counted only
    to the first 8K blocks, a prefix deeper than that would look shared by half the traffic,
    under the 1.25/2 a fleet of 2 needs)."""
    sessions = traffic(400, 6, shared=40)  # deeper than one learning step (8K blocks)
    alone, replica = AffinityKeys(K, 1.25), AffinityKeys(K, 1.25)
    feed(alone, sessions, 2)
    turn_order = [s[t] for t in range(6) for s in sessions]
    for i, req in enumerate(turn_order):
        if i % 2:  # the other replica routed it, and reported it
            replica.learn_elsewhere(req, 2)
        else:
            replica.key(req, 2)
            replica.learn(req)
    last = sessions[-1][-1]
    assert replica.key(last, 2) == alone.key(last, 2) == last.blocks[40]


def test_the_shares_window_follows_the_fleet_size_each_key_is_asked_for():
    keys = AffinityKeys(K, 1.25)
    first, second, third = (request([i, i + 1], i) for i in (1, 10, 20))
    keys.key(first, 8)
    assert keys.shared.window == 4096  # the shortest memory, for a small fleet
    keys.key(second, 512)
    assert keys.shared.window == 32 * 512  # resized when the fleet grew
    keys.key(third, 512)
    assert keys.shared.window == 32 * 512
    keys.key(first, 8)
    assert keys.shared.window == 4096  # and back when it shrank
