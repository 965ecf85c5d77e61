"""The peers' wire format: a report survives the trip through msgpack, and nothing else is read."""

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixroute.routing.peer_messages import (
    PeerFormatError,
    keys_from_bytes,
    keys_to_bytes,
    report_from_wire,
    report_to_wire,
)
from prefixroute.routing.peers import PeerReport, PeerRouted
from prefixroute.routing.request import RoutingRequest

U64 = st.integers(0, 2**64 - 1)


def trip(report: PeerReport) -> PeerReport:
    return report_from_wire(msgpack.unpackb(msgpack.packb(report_to_wire(report), use_bin_type=True), raw=False))


@given(
    loads=st.dictionaries(st.text(min_size=1, max_size=20), st.tuples(*[st.integers(0, 10**9)] * 3), max_size=6),
    routed=st.lists(
        st.tuples(
            st.sampled_from(["m0", "http://10.0.0.1:8000", "ünïcode"]),
            st.lists(U64, max_size=40),
            U64,
            U64,
            st.none() | st.text(min_size=1, max_size=12),  # the adapter, or the base model
        ),
        max_size=5,
    ),
    seq=st.integers(0, 2**40),
)
def test_a_report_comes_back_as_it_left(loads, routed, seq) -> None:
    report = PeerReport(
        "router-0-1234-abcd",
        seq,
        "f00d",
        tuple((name, *figures) for name, figures in loads.items()),
        tuple(
            PeerRouted(m, RoutingRequest(tuple(blocks), key, len(blocks) * 16, None, whole, adapter), i)
            for i, (m, blocks, key, whole, adapter) in enumerate(routed)
        ),
        1234.5,
        tuple(range(len(routed))),
        seq,
    )
    assert trip(report) == report


def test_block_keys_take_eight_bytes_each_little_endian() -> None:
    assert keys_to_bytes([1, 2**64 - 1]) == b"\x01" + b"\x00" * 7 + b"\xff" * 8
    assert keys_from_bytes(keys_to_bytes([5, 6, 7])) == (5, 6, 7)
    with pytest.raises(PeerFormatError):
        keys_from_bytes(b"\x00" * 9)


GOOD = report_to_wire(
    PeerReport("a", 0, "f", (("m0", 1, 2, 3),), (PeerRouted("m0", RoutingRequest((1,), 1, 16), 7),), 0.0, (3,), 2)
)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        [2, *GOOD[1:]],  # another version
        [1, 7, *GOOD[2:]],  # a sender that is not a string
        [*GOOD[:3], "now", *GOOD[4:]],  # a time that is not a number
        [*GOOD[:5], [1], *GOOD[6:]],  # members that are not names
        [*GOOD[:6], [[0, 1, 2]], *GOOD[7:]],  # a load of 3 figures
        [*GOOD[:6], [[5, 1, 2, 3]], *GOOD[7:]],  # a member index past the list
        [*GOOD[:6], [[0, -1, 2, 3]], *GOOD[7:]],  # a negative figure
        [*GOOD[:7], [[0, 16, 1, 1, "blocks", 7]], *GOOD[8:]],  # keys that are not bytes
        [*GOOD[:7], [[0, 16, 1, 1, b"\x00\x01", 7]], *GOOD[8:]],  # keys of the wrong width
        [*GOOD[:7], [[0, 16, 1, 1, b"\x00" * 8]], *GOOD[8:]],  # no number
        [*GOOD[:7], [[0, 16, 1, 1, b"\x00" * 8, 7, 5]], *GOOD[8:]],  # an adapter that is not a name
        [*GOOD[:7], [[0, 16, 1, 1, b"\x00" * 8, 7, ""]], *GOOD[8:]],  # an empty adapter
        [*GOOD[:7], [[0, 16, 1, 1, b"\x00" * 8, 7, "a", "b"]], *GOOD[8:]],  # an item too many
        [*GOOD[:8], ["one"], GOOD[9]],  # an end that is not a number
        [*GOOD[:9], -1],  # a negative oldest
    ],
)
def test_anything_else_is_refused(raw) -> None:
    with pytest.raises(PeerFormatError):
        report_from_wire(raw)


def test_a_base_model_request_keeps_the_six_items_replicas_of_before_read() -> None:
    base = PeerRouted("m0", RoutingRequest((1,), 1, 16), 7)
    for_sql = PeerRouted("m0", RoutingRequest((1,), 1, 16, adapter="sql"), 8)
    wire = report_to_wire(PeerReport("a", 0, "f", (), (base, for_sql), 0.0, (), 7))
    assert [len(item) for item in wire[7]] == [6, 7]
    assert [r.request.adapter for r in report_from_wire(wire).routed] == [None, "sql"]
