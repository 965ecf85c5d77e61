"""Which headers cross the router, in each direction.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and never cross a
proxy; lengths and framing are recomputed for the body actually sent. Everything
else — Authorization for an engine started with --api-key, the tenant header,
Accept-Encoding and the matching Content-Encoding (bodies are relayed
undecoded) — passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from multidict import CIMultiDict

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
_NOT_RELAYED = _HOP_BY_HOP | {"content-length", "date", "server"}


def upstream_headers(client: Mapping[str, str]) -> CIMultiDict[str]:
    """Headers to send to the engine for a client's request."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in client.items():
        if name.lower() not in _NOT_FORWARDED:
            out.add(name, value)
    return out


def relayed_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """Headers of the engine's response to pass back to the client."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in _NOT_RELAYED:
            out.add(name, value)
    return out
