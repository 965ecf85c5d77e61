import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.ring import HashRing

KEYS = [random.Random(i).getrandbits(64) for i in range(20000)]


def owners(ring):
    return [ring.owner(k) for k in KEYS]


def moved_fraction(a, b):
    return sum(x != y for x, y in zip(owners(a), owners(b))) / len(KEYS)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_adding_one_member_moves_about_one_in_n_plus_one_keys(n):
    before = HashRing({f"m{i}": 1.0 for i in range(n)})
    after = HashRing({f"m{i}": 1.0 for i in range(n + 1)})
    moved = moved_fraction(before, after)
    assert moved == pytest.approx(1 / (n + 1), rel=0.35)
    # Every moved key went to the new member, none between old members.
    for k in KEYS[:2000]:
        if before.owner(k) != after.owner(k):
            assert after.owner(k) == f"m{n}"


@pytest.mark.parametrize("n", [3, 8])
def test_removing_one_member_moves_only_its_keys(n):
    full = HashRing({f"m{i}": 1.0 for i in range(n)})
    less = HashRing({f"m{i}": 1.0 for i in range(n - 1)})
    moved = moved_fraction(full, less)
    assert moved == pytest.approx(1 / n, rel=0.35)
    for k in KEYS[:2000]:
        if full.owner(k) != f"m{n - 1}":
            assert less.owner(k) == full.owner(k)


def test_keys_spread_in_proportion_to_weight():
    ring = HashRing({"a": 1.0, "b": 1.0, "c": 2.0})
    share = Counter(owners(ring))
    assert share["c"] / len(KEYS) == pytest.approx(0.5, abs=0.07)
    assert share["a"] / len(KEYS) == pytest.approx(0.25, abs=0.07)


def test_weight_zero_stays_out_of_the_ring():
    ring = HashRing({"a": 1.0, "b": 0.0})
    assert ring.names == frozenset({"a"})
    assert set(owners(ring)) == {"a"}


def test_walk_yields_every_member_once_owner_first():
    ring = HashRing({f"m{i}": 1.0 for i in range(5)})
    for k in KEYS[:200]:
        walk = list(ring.walk(k))
        assert sorted(walk) == [f"m{i}" for i in range(5)]
        assert walk[0] == ring.owner(k)
        assert ring.rank(k)[walk[0]] == 0


def test_same_members_same_ring_in_any_insertion_order():
    a = HashRing({"x": 1.0, "y": 1.0, "z": 1.0})
    b = HashRing({"z": 1.0, "x": 1.0, "y": 1.0})
    assert owners(a)[:500] == owners(b)[:500]


def test_empty_ring_and_bad_arguments():
    assert HashRing({}).owner(5) is None
    with pytest.raises(ValueError, match="member 'a' has a negative weight"):
        HashRing({"a": -1.0})
    with pytest.raises(ValueError, match="virtual_nodes must be positive"):
        HashRing({"a": 1.0}, virtual_nodes=0)


@settings(max_examples=60, deadline=None)
@given(key=st.integers(0, (1 << 64) - 1), members=st.integers(1, 12), vnodes=st.integers(1, 40))
def test_ordering_by_distance_is_the_walk_order(key, members, vnodes):
    ring = HashRing({f"m{i}": 1.0 + (i % 3) / 2 for i in range(members)}, vnodes)
    walk = list(ring.walk(key))
    assert sorted(ring.names, key=lambda n: (ring.distance(key, n), n)) == walk
    assert ring.distance(key, "not-a-member") > max(ring.distance(key, n) for n in walk)
