"""Reading a body once: strict UTF-8, one JSON parse, types the router relies on, salt injection."""

from __future__ import annotations

import json

import pytest

from prefixroute.front.body import parse_body, with_cache_salt
from prefixroute.front.errors import BadRequest


def test_parses_and_keeps_the_original_bytes() -> None:
    raw = b'{"prompt": "hi", "stream": true}'
    body = parse_body(raw)
    assert body.raw is raw
    assert body.stream is True
    assert body.data["prompt"] == "hi"


def test_null_stream_means_not_streamed() -> None:
    assert parse_body(b'{"prompt": "hi", "stream": null}').stream is False


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"\xc3\x28", b"[]", b"1", b'{"stream": 1}', b'{"model": []}', b"[" * 200000 + b"]" * 200000],
)
def test_refuses(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_body(raw)


def test_salt_replaces_any_client_salt_and_stays_ascii() -> None:
    body = parse_body('{"prompt": "caf\u00e9 \\ud800", "cache_salt": "mine"}'.encode())
    out = with_cache_salt(body, "abc")
    decoded = json.loads(out)
    assert decoded["cache_salt"] == "abc"
    assert decoded["prompt"] == "caf\u00e9 \ud800"
    out.decode("ascii")
