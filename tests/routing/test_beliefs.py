"""prefix-cache's beliefs: events where trusted, routing history elsewhere, requests in flight meanwhile."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.beliefs import CacheBeliefs, events_view_capacity


def test_a_member_is_looked_up_from_history_until_its_events_are_trusted():
    b = CacheBeliefs(100)
    b.routed("a", [1, 2, 3])
    b.completed("a", [1, 2, 3])
    assert b.matched("a", [1, 2, 3, 4]) == 3
    b.set_precise("a", True)
    assert b.matched("a", [1, 2, 3, 4]) == 0  # the engine said nothing of these
    b.blocks_stored("a", [1, 2])
    assert b.matched("a", [1, 2, 3, 4]) == 2
    b.blocks_removed("a", [2])
    assert b.matched("a", [1, 2, 3, 4]) == 1
    b.set_precise("a", False)
    assert b.matched("a", [1, 2, 3, 4]) == 3


def test_requests_in_flight_count_until_they_end_so_a_burst_does_not_scatter():
    b = CacheBeliefs(100)
    b.set_precise("a", True)
    b.routed("a", [1, 2])
    b.routed("a", [1, 2, 3])
    assert b.matched("a", [1, 2, 3]) == 3
    b.completed("a", [1, 2, 3])
    assert b.matched("a", [1, 2, 3]) == 2
    b.completed("a", [1, 2])
    assert b.matched("a", [1, 2, 3]) == 0
    b.blocks_stored("a", [1])
    assert b.matched("a", [1, 2, 3]) == 1


def test_requests_in_flight_are_not_counted_for_members_looked_up_from_history():
    b = CacheBeliefs(100)
    b.routed("a", [1, 2, 3])
    assert b._in_flight == {}
    assert b.matched("a", [1, 2, 3]) == 3
    b.completed("a", [1, 2, 3])
    assert b._in_flight == {}


def test_clear_and_forget():
    b = CacheBeliefs(100)
    b.set_precise("a", True)
    b.blocks_stored("a", [1, 2])
    b.cache_cleared("a")
    assert b.matched("a", [1]) == 0
    assert b.is_precise("a")
    b.routed("a", [5])
    b.forget("a")
    assert not b.is_precise("a")
    assert b.sizes() == {}


def test_a_members_size_comes_from_the_view_its_lookups_use():
    """Replicas of a router route different requests but read the same events: a precise
    member's size is the events' figure, the same on every replica."""
    one, other = CacheBeliefs(100), CacheBeliefs(100)
    one.routed("a", [1, 2, 3])
    assert one.size("a") == 3
    assert other.size("a") == 0  # history: each replica's own
    for b in (one, other):
        b.set_precise("a", True)
        b.blocks_stored("a", [7, 8])
    assert one.size("a") == other.size("a") == 2


def test_each_view_is_capped_and_sizes_equal_a_recount():
    b = CacheBeliefs(10)
    for i in range(100):
        b.routed("a", [i * 3, i * 3 + 1, i * 3 + 2])
        b.blocks_stored("a", [1000 + i, 2000 + i])
        b.completed("a", [i * 3, i * 3 + 1, i * 3 + 2])
    # the events' view may hold EVENTS_VIEW_FACTOR times more: it must keep whatever the engine holds
    assert b.approximate.size("a") == 10
    assert b.stored.size("a") == events_view_capacity(10) == 80
    assert b.sizes() == {"a": 90}
    b.approximate.check()
    b.stored.check()


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.booleans(), st.sampled_from(["a", "b"]), st.lists(st.integers(min_value=0, max_value=5), max_size=4)
        ),
        max_size=30,
    )
)
def test_in_flight_blocks_are_a_multiset_of_the_requests_not_yet_ended(steps) -> None:
    """Against a Counter model: routed adds each block once, completed takes it away, a
    block leaves once nothing in flight holds it (duplicates and unknown blocks included)."""
    b = CacheBeliefs(100)
    for member in ("a", "b"):
        b.set_precise(member, True)  # only a precise member's requests in flight are counted
    model: dict[str, Counter[int]] = {}
    for routing, member, blocks in steps:
        if routing:
            b.routed(member, blocks)
            if blocks:
                model.setdefault(member, Counter()).update(blocks)
        elif member in model and blocks:
            flying = model[member]
            flying.subtract(blocks)
            for block in blocks:
                if flying.get(block, 0) <= 0:
                    flying.pop(block, None)
            if not flying:
                del model[member]
            b.completed(member, blocks)
        else:
            b.completed(member, blocks)
        assert {m: dict(c) for m, c in model.items()} == b._in_flight
