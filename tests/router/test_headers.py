from __future__ import annotations

from multidict import CIMultiDict

from prefixroute.router.headers import relayed_headers, upstream_headers


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
