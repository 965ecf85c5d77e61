"""The router's metrics: the shared set (`prefixroute.front.metrics`) under
`prefixroute_router_`, plus retries, which only a proxy that forwards itself makes."""

from __future__ import annotations

from prometheus_client import Counter

from prefixroute.front.metrics import CONTENT_TYPE, FrontMetrics, StateView

PREFIX = "prefixroute_router_"

__all__ = ["CONTENT_TYPE", "PREFIX", "RouterMetrics", "StateView"]


class RouterMetrics(FrontMetrics):
    prefix = PREFIX

    def __init__(self, strategy: str) -> None:
        super().__init__(strategy)
        self._retries = Counter(
            PREFIX + "retries", "Attempts moved to another member", ["reason"], registry=self.registry
        )

    def retry(self, reason: str) -> None:
        self._retries.labels(reason).inc()
