"""Which headers cross the router, in each direction.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and never cross a
proxy, in either direction: the fixed list below, and every header the sender named in
its own `Connection` header (`Connection: close, X-Secret` makes X-Secret hop-by-hop).
Lengths and framing are recomputed for the body actually sent. Everything
else — Authorization for an engine started with --api-key (unless it held one of the
router's own API keys: that one is for the router alone), the tenant header,
Accept-Encoding and the matching Content-Encoding (bodies are relayed
undecoded) — passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from multidict import CIMultiDict, CIMultiDictProxy

_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Proxy-Connection",
    )
)
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "expect"}
_NOT_FORWARDED_WITH_KEYS = _NOT_FORWARDED | {"authorization"}
_NOT_RELAYED = _HOP_BY_HOP | {"content-length", "date", "server"}


def named_by_connection(headers: Mapping[str, str]) -> frozenset[str]:
    """The header names (lower-case) listed in the `Connection` header(s) of a message."""
    if "Connection" not in headers:
        return frozenset()
    if isinstance(headers, (CIMultiDict, CIMultiDictProxy)):
        values = headers.getall("Connection")
    else:
        values = [headers["Connection"]]
    return frozenset(token for value in values for t in value.split(",") if (token := t.strip().lower()))


def upstream_headers(client: Mapping[str, str], drop_authorization: bool = False) -> CIMultiDict[str]:
    """Headers to send to the engine for a client's request. `drop_authorization`: the client's
    `Authorization` held one of the router's own API keys, which is for the router alone."""
    return _crossing(client, _NOT_FORWARDED_WITH_KEYS if drop_authorization else _NOT_FORWARDED)


def relayed_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """Headers of the engine's response to pass back to the client."""
    return _crossing(upstream, _NOT_RELAYED)


def _crossing(headers: Mapping[str, str], skip: frozenset[str]) -> CIMultiDict[str]:
    """The headers not in `skip` (lower-case names) nor named by the message's `Connection`."""
    # The membership test first: most messages carry no `Connection` header, and
    # `named_by_connection` would be a call on each of the two crossings of every request.
    if "Connection" in headers:
        named = named_by_connection(headers)
        if named:
            skip = skip | named
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in skip:
            out.add(name, value)
    return out
