"""The operator's own Prometheus metrics (prefix ``prefixroute_operator_``), in a private
registry so tests can build many operators; ``prefixroute operator --metrics-port`` serves it.

Labels are ``model_namespace`` and ``model`` (the PrefixRoutedModel's namespace and name)
everywhere — not ``namespace``, which every pod scrape sets to the operator pod's own
namespace (a metric's ``namespace`` would be renamed ``exported_namespace``, or, with
honor_labels, would hide the scrape's) — plus:

- ``prefixroute_operator_autoscaling_decisions_total{action}``: every autoscaler decision
  (hold, scale-up, scale-down, drain, rebalance) and ``dry_run`` ("true"/"false");
- ``prefixroute_operator_replicas``: engine pods that exist and are not being deleted;
- ``prefixroute_operator_desired_replicas``: engine replicas the operator drives towards;
- ``prefixroute_operator_ring_members``: members in the published ring;
- ``prefixroute_operator_hit_rate`` / ``prefixroute_operator_ttft_p50_seconds``: the
  fleet's signals as the autoscaler last read them (absent while unknown);
- ``prefixroute_operator_held_requests``: requests the model's routers held for want of an
  engine, as the autoscaler last read them (a model at zero replicas wakes on these);
- ``prefixroute_operator_metrics_available``: 1 when the last tick read fresh signals;
- ``prefixroute_operator_autoscaling_metrics_errors_total{reason}``: ticks that held
  because signals were unavailable (reason as in the MetricsAvailable condition);
- ``prefixroute_operator_reconcile_errors_total{reason}``: reconciles that ended
  InvalidSpec, ApplyRejected or ApplyFailed;
- ``prefixroute_operator_reconcile_seconds`` and ``prefixroute_operator_autoscale_tick_seconds``:
  how long reconciles and autoscaler ticks take, waits for the model's lock and for the API
  server or Prometheus included — histograms over every model, without the model labels (a
  thousand models would make a thousand histograms of twenty buckets each);
- where a ring update's time goes, also over every model: ``..._ring_update_seconds``, from
  the handler of a pod or model event starting to the new ring written (the model's lock,
  the lane and the API server included; kopf's own queue before the handler not);
  ``..._status_lane_wait_seconds{lane}``, a status write waiting for a thread of its lane
  (``watch``: the pod watch's writes; ``background``: writes that may wait);
  ``..._status_write_seconds{lane}``, the API server's answer to one status patch; and
  ``..._loop_lag_seconds``, how late the models loop's one-second sleep wakes (the event
  loop busy, or the process waiting for a CPU);
- ``prefixroute_operator_adapter_replicas{adapter}``: engine pods that hold each of
  spec.adapters loaded, as the adapter sync last confirmed it (controller/adapter_sync.py);
- ``prefixroute_operator_autoscale_read_seconds``: one autoscaler round's read of every due
  model's signals (all its PromQL, Prometheus' answers included), the part of a tick that is
  Prometheus'.

A deleted model's series are removed (``forget``), so dashboards do not show ghosts.

``serve`` renders the page at most once every ``PAGE_MAX_AGE`` seconds, whoever asks: at
1,000 models it is 6,000 lines and 100-250 ms of the operator's CPU (rendering holds the
interpreter's lock), and a scraper asking every 2 s (the local test cluster) cost half the
operator's idle CPU. The figures are the autoscaler's, refreshed once a tick (15 s by default).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

PREFIX = "prefixroute_operator_"
PAGE_MAX_AGE = 10.0
MODEL = ("model_namespace", "model")
DURATION_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
)  # fmt: skip
"""Seconds; fine enough around the goals (a tick within 10 s, a ring update within 2 s)."""
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds; for waits that should be short (a lane's queue, the event loop's lag)."""


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions = Counter(
            PREFIX + "autoscaling_decisions",
            "Autoscaler decisions by action",
            [*MODEL, "action", "dry_run"],
            registry=r,
        )
        self.replicas = Gauge(
            PREFIX + "replicas", "Engine pods that exist and are not being deleted", MODEL, registry=r
        )
        self.desired_replicas = Gauge(
            PREFIX + "desired_replicas", "Engine replicas the operator drives towards", MODEL, registry=r
        )
        self.ring_members = Gauge(PREFIX + "ring_members", "Members of the published ring", MODEL, registry=r)
        self.hit_rate = Gauge(
            PREFIX + "hit_rate", "Prefix cache hit rate the autoscaler last read (0..1)", MODEL, registry=r
        )
        self.ttft_p50 = Gauge(
            PREFIX + "ttft_p50_seconds", "Median time to first token the autoscaler last read", MODEL, registry=r
        )
        self.held_requests = Gauge(
            PREFIX + "held_requests",
            "Requests the routers held for want of an engine, as the autoscaler last read them",
            MODEL,
            registry=r,
        )
        self.metrics_available = Gauge(
            PREFIX + "metrics_available",
            "1 when the autoscaler's last tick read fresh signals, else 0",
            MODEL,
            registry=r,
        )
        self.metrics_errors = Counter(
            PREFIX + "autoscaling_metrics_errors",
            "Autoscaler ticks that held because signals were unavailable",
            [*MODEL, "reason"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            PREFIX + "reconcile_errors", "Reconciles that did not apply the spec", [*MODEL, "reason"], registry=r
        )
        self.adapter_replicas = Gauge(
            PREFIX + "adapter_replicas",
            "Engine pods that hold the LoRA adapter loaded, as the engines confirmed it",
            [*MODEL, "adapter"],
            registry=r,
        )
        self._add_timings(r)
        self._labelled: dict[tuple[str, str], set[tuple[MetricWrapperBase, tuple[str, ...]]]] = {}

    def _add_timings(self, r: CollectorRegistry) -> None:
        """How long the operator's own work takes: the figures behind docs/operator.md's scale table."""
        self.reconcile_seconds = Histogram(
            PREFIX + "reconcile_seconds",
            "How long a reconcile took (plan, dry run, apply, status), its wait for the model included",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.autoscale_tick_seconds = Histogram(
            PREFIX + "autoscale_tick_seconds",
            "How long an autoscaler tick took, from reading the signals to the status written",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.ring_update_seconds = Histogram(
            PREFIX + "ring_update_seconds",
            "From an event's handler starting to the new ring written (lock, lane and API server included)",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.status_lane_wait_seconds = Histogram(
            PREFIX + "status_lane_wait_seconds",
            "How long a status write waited for a thread of its lane",
            ["lane"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.status_write_seconds = Histogram(
            PREFIX + "status_write_seconds",
            "How long the API server took to answer one status patch",
            ["lane"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.loop_lag_seconds = Histogram(
            PREFIX + "loop_lag_seconds",
            "How late the models loop's one-second sleep woke",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.autoscale_read_seconds = Histogram(
            PREFIX + "autoscale_read_seconds",
            "How long an autoscaler round took to read every due model's signals from Prometheus",
            buckets=DURATION_BUCKETS,
            registry=r,
        )

    def _remember(self, metric: MetricWrapperBase, labels: tuple[str, ...]) -> None:
        self._labelled.setdefault((labels[0], labels[1]), set()).add((metric, labels))

    def decision(self, namespace: str, model: str, action: str, dry_run: bool) -> None:
        labels = (namespace, model, action, "true" if dry_run else "false")
        self.decisions.labels(*labels).inc()
        self._remember(self.decisions, labels)

    def fleet(self, namespace: str, model: str, *, replicas: int, desired: int, ring: int) -> None:
        for gauge, value in ((self.replicas, replicas), (self.desired_replicas, desired), (self.ring_members, ring)):
            gauge.labels(namespace, model).set(value)
            self._remember(gauge, (namespace, model))

    def signals(
        self, namespace: str, model: str, hit_rate: float | None, ttft_p50: float | None, held: float = 0.0
    ) -> None:
        self.metrics_available.labels(namespace, model).set(1)
        self._remember(self.metrics_available, (namespace, model))
        self.held_requests.labels(namespace, model).set(held)
        self._remember(self.held_requests, (namespace, model))
        for gauge, value in ((self.hit_rate, hit_rate), (self.ttft_p50, ttft_p50)):
            if value is None:
                try:
                    gauge.remove(namespace, model)
                except KeyError:
                    pass
            else:
                gauge.labels(namespace, model).set(value)
                self._remember(gauge, (namespace, model))

    def signals_unavailable(self, namespace: str, model: str, reason: str) -> None:
        self.metrics_available.labels(namespace, model).set(0)
        self._remember(self.metrics_available, (namespace, model))
        self.metrics_errors.labels(namespace, model, reason).inc()
        self._remember(self.metrics_errors, (namespace, model, reason))

    def reconcile_error(self, namespace: str, model: str, reason: str) -> None:
        self.reconcile_errors.labels(namespace, model, reason).inc()
        self._remember(self.reconcile_errors, (namespace, model, reason))

    def adapters_loaded(self, namespace: str, model: str, replicas: Mapping[str, int]) -> None:
        """Each of spec.adapters' loaded replicas; an adapter gone from the spec loses its series."""
        for metric, labels in list(self._labelled.get((namespace, model), set())):
            if metric is self.adapter_replicas and labels[2] not in replicas:
                metric.remove(*labels)
                self._labelled[(namespace, model)].discard((metric, labels))
        for adapter, count in replicas.items():
            self.adapter_replicas.labels(namespace, model, adapter).set(count)
            self._remember(self.adapter_replicas, (namespace, model, adapter))

    def reconciled(self, seconds: float) -> None:
        self.reconcile_seconds.observe(seconds)

    def ticked(self, seconds: float) -> None:
        self.autoscale_tick_seconds.observe(seconds)

    def read_signals(self, seconds: float) -> None:
        self.autoscale_read_seconds.observe(seconds)

    def ring_updated(self, seconds: float) -> None:
        self.ring_update_seconds.observe(seconds)

    def status_written(self, lane: str, waited: float, answered: float) -> None:
        """Thread-safe (called from the lane's thread)."""
        self.status_lane_wait_seconds.labels(lane).observe(waited)
        self.status_write_seconds.labels(lane).observe(answered)

    def loop_lagged(self, seconds: float) -> None:
        self.loop_lag_seconds.observe(max(0.0, seconds))

    def forget(self, namespace: str, model: str) -> None:
        """The model is gone: drop every series that names it."""
        for metric, labels in self._labelled.pop((namespace, model), set()):
            try:
                metric.remove(*labels)
            except KeyError:
                pass

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (tests and the e2e suite read it back this way)."""
        return self.registry.get_sample_value(name, labels)


class RenderedPage:
    """The registry's text page, rendered again only when the last one is ``max_age`` old."""

    def __init__(
        self, registry: CollectorRegistry, max_age: float = PAGE_MAX_AGE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._registry, self._max_age, self._clock = registry, max_age, clock
        self._lock = threading.Lock()
        self._page: bytes | None = None
        self._at = 0.0

    def __call__(self) -> bytes:
        with self._lock:
            now = self._clock()
            if self._page is None or now - self._at >= self._max_age:
                self._page, self._at = generate_latest(self._registry), now
            return self._page


def serve(registry: CollectorRegistry, port: int, host: str, max_age: float = PAGE_MAX_AGE) -> http.server.HTTPServer:
    """``/metrics`` (and ``/``) on host:port in a thread of its own; returns the server."""
    page = RenderedPage(registry, max_age)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            body = page()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # http.server names it `format`
            pass  # a scrape every few seconds is no news

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
