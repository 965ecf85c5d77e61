import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.prefix_index import MemberIndex, PrefixIndex


def test_matched_counts_leading_blocks_and_stops_at_first_miss():
    index = MemberIndex(10)
    index.record([1, 2, 3])
    assert index.matched([1, 2, 3, 4]) == 3
    assert index.matched([1, 9, 3]) == 1
    assert index.matched([9, 1, 2]) == 0


def test_least_recently_used_block_is_evicted_first():
    index = MemberIndex(3)
    index.record([1, 2, 3])
    index.record([1])  # 1 is now the most recent
    index.record([4])
    assert 2 not in index
    assert 1 in index
    assert 3 in index
    assert 4 in index


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 20),
    batches=st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=30),
)
def test_cap_never_exceeded_and_size_equals_recount(capacity, batches):
    index = MemberIndex(capacity)
    recent: list[int] = []
    for batch in batches:
        index.record(batch)
        for b in batch:
            if b in recent:
                recent.remove(b)
            recent.append(b)
        recent = recent[-capacity:]
        assert len(index) <= capacity
        assert len(index) == len(recent)
        assert all(b in index for b in recent)


def test_per_member_indexes_are_separate_and_forgettable():
    index = PrefixIndex(100)
    index.record("a", [1, 2])
    index.record("b", [1])
    assert index.matched("a", [1, 2]) == 2
    assert index.matched("b", [1, 2]) == 1
    assert index.size() == 3
    assert index.size("a") == 2
    index.forget("a")
    assert index.matched("a", [1, 2]) == 0
    assert index.size() == 1


def test_memory_is_bounded_by_members_times_cap():
    index = PrefixIndex(50)
    rng = random.Random(1)
    for _ in range(2000):
        index.record(f"m{rng.randrange(4)}", [rng.getrandbits(64) for _ in range(8)])
    assert index.size() <= 4 * 50


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be positive"):
        MemberIndex(0)


# --- the global map: key -> holders ----------------------------------------------------

MEMBERS = ("a", "b", "c", "d")
ops = st.lists(
    st.tuples(
        st.sampled_from(("record", "record", "record", "remove", "forget")),
        st.sampled_from(MEMBERS),
        st.lists(st.integers(0, 30), max_size=10),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 12), steps=ops, query=st.lists(st.integers(0, 30), max_size=12))
def test_holders_map_equals_a_recount_and_caps_hold_after_any_changes(capacity, steps, query):
    index = PrefixIndex(capacity)
    for op, member, blocks in steps:
        getattr(index, op)(member, *([blocks] if op != "forget" else []))
        index.check()
        assert all(size <= capacity for size in index.sizes().values())
        assert index.size() == sum(index.sizes().values())
    # Without a limit, matches() is every member's own match, for the members that match something.
    every = {m: index.matched(m, query) for m in MEMBERS}
    assert index.matches(query) == {m: n for m, n in every.items() if n}
    # With one: never more than `limit` members, each with its true match, and all of them
    # when no more than `limit` members hold any key of the query.
    holding = {m for b in query for m in index.holders(b)}
    for limit in (1, 2, 3):
        found = index.matches(query, limit)
        assert len(found) <= limit
        assert all(every[m] == n for m, n in found.items())
        if len(holding) <= limit:
            assert found == {m: n for m, n in every.items() if n}


@settings(max_examples=200, deadline=None)
@given(depths=st.lists(st.integers(0, 12), min_size=1, max_size=6), limit=st.integers(1, 6))
def test_with_a_limit_the_deepest_prefixes_are_kept(depths, limit):
    """Members holding prefixes of one chain (as routing history leaves them): the walk keeps
    the members with the longest matches, never one with a shorter match over a longer one."""
    index = PrefixIndex(100)
    chain = list(range(500, 512))
    for i, depth in enumerate(depths):
        index.record(f"m{i}", chain[:depth])
    found = index.matches(chain, limit)
    matching = {f"m{i}": d for i, d in enumerate(depths) if d}
    assert all(matching[m] == n for m, n in found.items())
    for m, depth in matching.items():
        if m not in found:
            assert all(n >= depth for n in found.values())
            # left out only because the members with its match or longer are too many
            assert sum(1 for d in matching.values() if d >= depth) > limit


def test_matches_looks_only_at_members_holding_the_deepest_keys():
    index = PrefixIndex(1000)
    shared = list(range(100, 108))
    for i in range(20):
        index.record(f"m{i}", shared)  # a prefix every member holds
    session = [*shared, 1, 2, 3]
    index.record("m7", session)
    index.record("m3", session[:-1])
    assert index.matches(session, limit=4) == {"m7": 11, "m3": 10}
    assert len(index.matches(session)) == 20  # no limit: everyone who holds the shared prefix
    assert index.matches([999, *session]) == {}  # chained keys: a different first block matches nothing


def test_a_member_that_lost_the_start_of_a_prefix_matches_only_what_it_still_holds():
    index = PrefixIndex(3)
    index.record("a", [1, 2, 3])
    index.record("a", [7])  # the LRU drops key 1, the start of the prefix
    assert index.matched("a", [1, 2, 3]) == 0
    assert index.matches([1, 2, 3]) == {}
    assert index.holders(3) == {"a"}


def test_remove_and_forget_take_members_out_of_the_map():
    index = PrefixIndex(10)
    index.record("a", [1, 2, 3])
    index.record("b", [1, 2])
    index.remove("a", [2, 3, 99])
    assert index.matched("a", [1, 2, 3]) == 1
    assert index.holders(2) == {"b"}
    assert index.holders(3) == frozenset()
    index.forget("b")
    assert index.holders(1) == {"a"}
    assert index.distinct_blocks() == 1
    index.remove("a", [1])
    assert index.members() == []
    assert index.distinct_blocks() == 0
    index.check()


def test_a_wrong_held_prefix_hint_is_caught():
    index = PrefixIndex(10)
    index.record("a", [1, 2])
    index.record("a", [1, 2, 3, 4], held_prefix=4)  # wrong: 3 and 4 are new
    index.check()
    assert index.matched("a", [1, 2, 3, 4]) == 4
    assert index.holders(4) == {"a"}
    index.record("a", [1, 2, 3, 4, 5], held_prefix=4)
    index.check()
    assert index.matched("a", [1, 2, 3, 4, 5]) == 5


def test_a_removal_naming_a_block_twice_drops_it_once_and_keeps_other_holders():
    index = PrefixIndex(10)
    index.record("a", [1, 2, 3])
    index.record("b", [2])
    index.remove("a", [2, 2, 9, 3])
    index.check()
    assert index.holders(2) == frozenset({"b"})
    assert index.holders(3) == frozenset()
    assert index.matched("a", [1]) == 1
