"""Event-boundary relay: every byte arrives, and a partial event never precedes an error event."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from prefixroute.router.sse import EventBoundary

STREAM = b'data: {"a": 1}\n\ndata: {"b": "\xc3\xa9"}\n\ndata: [DONE]\n\n'


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_relays_every_byte_in_order(cuts: list[int]) -> None:
    framer = EventBoundary()
    points = [0, *sorted(cuts), len(STREAM)]
    out = b"".join(framer.feed(STREAM[a:b]) for a, b in itertools.pairwise(points))
    assert out + framer.rest() == STREAM
    assert out == STREAM  # a stream that ends on a boundary holds nothing back


@given(cut=st.integers(min_value=1, max_value=len(STREAM) - 1))
def test_released_bytes_end_on_a_boundary(cut: int) -> None:
    released = EventBoundary().feed(STREAM[:cut])
    assert released == b"" or released.endswith(b"\n\n")


def test_crlf_and_cr_boundaries() -> None:
    framer = EventBoundary()
    assert framer.feed(b"data: 1\r\n\r\ndata: 2") == b"data: 1\r\n\r\n"
    assert framer.feed(b"\r\rdata") == b"data: 2\r\r"
    assert framer.rest() == b"data"
