"""The router's speed-up of the routing core's normalise(): same result as the regex definition."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from prefixroute.routing.canonical import normalise

_RUN = re.compile(r"\s+")


def reference(text: str) -> str:
    return _RUN.sub(" ", unicodedata.normalize("NFC", text)).strip()


whitespace = st.sampled_from(
    [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u3000"]
)


@given(st.lists(st.text(max_size=6) | whitespace, max_size=30).map("".join))
def test_same_as_the_regex_definition(text: str) -> None:
    assert normalise(text) == reference(text)


def test_every_whitespace_code_point_agrees() -> None:
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    assert spaces == [chr(c) for c in range(0x110000) if _RUN.fullmatch(chr(c))]
    text = "a" + "".join(spaces) + "b"
    assert normalise(text) == reference(text) == "a b"
