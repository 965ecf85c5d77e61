from __future__ import annotations

from multidict import CIMultiDict

from prefixroute.router.headers import named_by_connection, relayed_headers, upstream_headers


def test_upstream_drops_hop_by_hop_and_framing() -> None:
    client = CIMultiDict(
        {
            "Host": "r",
            "Content-Length": "5",
            "Connection": "keep-alive",
            "Authorization": "Bearer k",
            "Transfer-Encoding": "chunked",
            "X-Tenant": "t",
            "Accept-Encoding": "gzip",
        }
    )
    out = upstream_headers(client)
    assert dict(out) == {"Authorization": "Bearer k", "X-Tenant": "t", "Accept-Encoding": "gzip"}


def test_relayed_keeps_content_type_and_encoding() -> None:
    upstream = CIMultiDict(
        {
            "Content-Type": "text/event-stream",
            "Content-Encoding": "gzip",
            "Transfer-Encoding": "chunked",
            "Content-Length": "3",
            "Keep-Alive": "timeout=5",
            "Date": "x",
            "X-Request-Id": "1",
        }
    )
    assert dict(relayed_headers(upstream)) == {
        "Content-Type": "text/event-stream",
        "Content-Encoding": "gzip",
        "X-Request-Id": "1",
    }


def test_headers_named_in_connection_are_hop_by_hop_both_ways() -> None:
    # RFC 9110 §7.6.1: a sender lists in Connection the headers meant for the next hop only
    client = CIMultiDict([("Connection", "keep-alive, X-Hop"), ("Connection", " x-other ,"), ("X-Hop", "1")])
    client.add("X-Other", "2")
    client.add("X-Kept", "3")
    assert dict(upstream_headers(client)) == {"X-Kept": "3"}
    upstream = CIMultiDict({"Connection": "X-Engine-Private", "X-Engine-Private": "s", "X-Request-Id": "1"})
    assert dict(relayed_headers(upstream)) == {"X-Request-Id": "1"}


def test_a_plain_mapping_names_its_connection_headers_too() -> None:
    assert named_by_connection({"Connection": "Close, X-A"}) == {"close", "x-a"}
    assert named_by_connection({"X-A": "1"}) == frozenset()
