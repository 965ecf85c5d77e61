"""What the front door counts: refusals by reason, requests waiting for capacity and how long
they waited (in all, and per priority band: waiting, admitted, shed by reason, wait), and the
API keys in force. No label names a tenant or a key: tenants are unbounded and private, keys
are secrets. A band's label is its priority, an integer from the configuration (the key file,
the objectives), so the bands are few."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from prefixroute.tenancy.bands import SHED_REASONS

_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
REASONS = ("unauthorized", "rate_limited_requests", "rate_limited_tokens", "overloaded", "shed")


class _GateCollector(Collector):
    def __init__(
        self,
        prefix: str,
        waiting: Callable[[], int],
        keys: Callable[[], tuple[int, int, int] | None],
        bands: Callable[[], Mapping[int, int]],
        objectives: Callable[[], Mapping[str, int]],
    ) -> None:
        self.prefix, self.waiting, self.keys, self.bands = prefix, waiting, keys, bands
        self.objectives = objectives

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            self.prefix + "waiting_requests",
            "Requests waiting at the front for an engine with room",
            value=self.waiting(),
        )
        by_band = GaugeMetricFamily(
            self.prefix + "priority_waiting_requests",
            "Requests waiting at the front for an engine with room, by priority band",
            labels=["priority"],
        )
        for priority, waiting in sorted(self.bands().items()):
            by_band.add_metric([str(priority)], waiting)
        yield by_band
        objectives = GaugeMetricFamily(
            self.prefix + "objective_priority",
            "The priority band of each InferenceObjective the front knows (--objective-priorities, "
            "or read from the API by the picker)",
            labels=["objective"],
        )
        for name, priority in sorted(self.objectives().items()):
            objectives.add_metric([name], priority)
        yield objectives
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
        self._admitted = Counter(
            prefix + "priority_admitted",
            "Requests let on to an engine while fair sharing is on, by priority band",
            ["priority"],
            registry=registry,
        )
        self._shed = Counter(
            prefix + "priority_shed",
            "Requests refused without reaching an engine while engines were full, by priority band and reason "
            "(sheddable, queue-full, queue-ttl)",
            ["priority", "reason"],
            registry=registry,
        )
        self._band_wait = Histogram(
            prefix + "priority_wait_seconds",
            "How long admitted requests waited at the front, by priority band (0 when there was room at once)",
            ["priority"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )

    def attach(
        self,
        waiting: Callable[[], int],
        keys: Callable[[], tuple[int, int, int] | None],
        bands: Callable[[], Mapping[int, int]] = dict,
        objectives: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.registry.register(_GateCollector(self.prefix, waiting, keys, bands, objectives))

    def rejected(self, reason: str) -> None:
        self._children[reason].inc()

    def admitted(self, priority: int, waited: float) -> None:
        band = str(priority)
        self._admitted.labels(band).inc()
        self._band_wait.labels(band).observe(waited)

    def shed(self, priority: int, reason: str) -> None:
        if reason not in SHED_REASONS:
            raise KeyError(reason)
        self._shed.labels(str(priority), reason).inc()
