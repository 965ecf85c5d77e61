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
    assert 2 not in index and 1 in index and 3 in index and 4 in index


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
    assert index.matched("a", [1, 2]) == 2 and index.matched("b", [1, 2]) == 1
    assert index.size() == 3 and index.size("a") == 2
    index.forget("a")
    assert index.matched("a", [1, 2]) == 0 and index.size() == 1


def test_memory_is_bounded_by_members_times_cap():
    index = PrefixIndex(50)
    rng = random.Random(1)
    for _ in range(2000):
        index.record(f"m{rng.randrange(4)}", [rng.getrandbits(64) for _ in range(8)])
    assert index.size() <= 4 * 50


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        MemberIndex(0)
