"""What the front door counts: refusals by reason, requests waiting for capacity and how long
they waited, and the API keys in force. No label names a tenant or a key: tenants are
unbounded and private, keys are secrets."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
REASONS = ("unauthorized", "rate_limited_requests", "rate_limited_tokens", "overloaded")


class _GateCollector(Collector):
    def __init__(
        self, prefix: str, waiting: Callable[[], int], keys: Callable[[], tuple[int, int, int] | None]
    ) -> None:
        self.prefix, self.waiting, self.keys = prefix, waiting, keys

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            self.prefix + "waiting_requests",
            "Requests waiting at the front for an engine with room",
            value=self.waiting(),
        )
        keys = self.keys()
        if keys is not None:
            count, reloads, errors = keys
            yield GaugeMetricFamily(self.prefix + "api_keys", "API keys in force", value=count)
            yield CounterMetricFamily(
                self.prefix + "api_keys_reloads", "Times a changed API-key file took effect", value=reloads
            )
            yield CounterMetricFamily(
                self.prefix + "api_keys_reload_errors",
                "Times a changed API-key file could not be used (the last good keys stayed in force)",
                value=errors,
            )


class GateMetrics:
    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.registry, self.prefix = registry, prefix
        self._rejected = Counter(
            prefix + "rejected", "Requests refused at the front door, by reason", ["reason"], registry=registry
        )
        self._children = {reason: self._rejected.labels(reason) for reason in REASONS}
        self.wait = Histogram(
            prefix + "admission_wait_seconds",
            "How long requests that found every engine full waited before going on",
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )

    def attach(self, waiting: Callable[[], int], keys: Callable[[], tuple[int, int, int] | None]) -> None:
        self.registry.register(_GateCollector(self.prefix, waiting, keys))

    def rejected(self, reason: str) -> None:
        self._children[reason].inc()
