"""The token store: least recently used pieces leave first, the tokens held never pass the capacity."""

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.token_store import TokenStore


def ids(n: int) -> array:
    return array("q", range(n))


def test_found_pieces_become_recent_and_the_oldest_leave_first():
    store = TokenStore(capacity=10)
    store.add([("a", ids(4)), ("b", ids(4))])
    assert store.find(["a", "c"]) == [ids(4), None]  # "a" is now the most recent
    store.add([("c", ids(4))])  # 12 > 10: "b" leaves
    assert store.find(["b", "a", "c"]) == [None, ids(4), ids(4)]
    assert store.counts() == {
        "hits": 3, "misses": 2, "reused_tokens": 12, "tokenized_tokens": 12, "tokens": 8, "pieces": 2,
        "capacity_tokens": 10,
    }  # fmt: skip


def test_a_piece_larger_than_the_store_is_not_held_and_a_negative_capacity_is_refused():
    store = TokenStore(capacity=3)
    store.add([("big", ids(5))])
    assert len(store) == 0
    assert store.tokens == 0
    with pytest.raises(ValueError, match="negative"):
        TokenStore(-1)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 30), st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 12)), max_size=40))
def test_the_tokens_held_equal_a_recount_and_never_pass_the_capacity(capacity, adds):
    store = TokenStore(capacity)
    for piece, n in adds:
        store.add([(piece, ids(n))])
        store.find([piece])
        assert store.tokens == sum(len(v) for v in store._ids.values()) <= capacity
