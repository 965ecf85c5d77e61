"""The router's metrics: the set both fronts export (`prefixroute.front.metrics`) under
`prefixroute_router_`."""

from __future__ import annotations

from prefixroute.front.metrics import CONTENT_TYPE, FrontMetrics, StateView

PREFIX = "prefixroute_router_"

__all__ = ["CONTENT_TYPE", "PREFIX", "RouterMetrics", "StateView"]


class RouterMetrics(FrontMetrics):
    prefix = PREFIX
