"""The EPP's metrics: the set both fronts export (`prefixroute.front.metrics`) under
`prefixroute_epp_`. Time to first byte and duration are measured from the request's
headers reaching the EPP to the response's first body chunk and its end, as the gateway
reports them (no response events: no first byte, duration to the end of the stream)."""

from __future__ import annotations

from prefixroute.front.metrics import CONTENT_TYPE, FrontMetrics

PREFIX = "prefixroute_epp_"

__all__ = ["CONTENT_TYPE", "PREFIX", "EppMetrics"]


class EppMetrics(FrontMetrics):
    prefix = PREFIX
