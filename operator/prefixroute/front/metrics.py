"""The Prometheus metrics both fronts export, each under its own prefix (`prefixroute_router_`,
`prefixroute_epp_`), in a private registry (so tests can build many of them).

Counters are updated on the request path through cached label children (a
`labels()` call takes a lock and builds a key; a cached child is one dict lookup).
The four request histograms are `LoopHistogram`s: prometheus_client's Histogram
takes a lock for the sum and another for the bucket on every observation, and the
four cost about 7 µs per request (measured under load, of about 180 µs for the
router's whole request); both fronts observe them only on their event loop's
thread, so plain counters do, rendered at scrape time exactly as prometheus_client
renders a Histogram (tests/front/test_metrics.py compares the text). Gauges that mirror state — in-flight requests per member, ring
size, load imbalance — are not updated per request at all: a collector reads
them from the router's state when Prometheus scrapes.

`prefix_match_ratio` is the front's own estimate (matched blocks / total blocks
for the member it chose), and only a strategy that keeps a prefix index can make
one; with `prefix-hash`, `least-load` and `round-robin` the histogram stays empty
rather than reporting a number nobody computed.
"""

from __future__ import annotations

import math
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from prefixroute.front.recent import RecentCounters, RecentValues

if TYPE_CHECKING:
    from prefixroute.front.peers import PeerStatus
    from prefixroute.front.tokenizer_source import TokenizerStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)
_RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0)
_PREDICTION_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)  # delivered / predicted TTFT
_LAG_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0)
# KV events: up to the default behind threshold (1 s) finely, and how far behind past it
_EVENT_LAG_BUCKETS = (1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


_RESIDENT = {True: "true", False: "false", None: "unknown"}
_ADAPTER_HELP = (
    "Requests routed for a LoRA adapter, by adapter and whether the chosen member was believed to hold it in "
    "a slot (unknown: no belief without --adapter-slots, or a strategy that keeps none)"
)

# prometheus_client's own switch for the `_created` series, read as it reads it
_CREATED_SERIES = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() != "true"


class LoopHistogram:
    """A histogram observed from one thread only (the event loop's), without locks.

    `observe` is one bisect and two additions. `metric()` renders the same samples,
    in the same order and format, as prometheus_client's unlabelled Histogram with
    these buckets: cumulative `_bucket{le=...}` up to `+Inf`, `_count`, `_sum`, `_created`.
    """

    __slots__ = ("bounds", "counts", "created", "documentation", "labels", "name", "sum")

    def __init__(self, name: str, documentation: str, buckets: Iterable[float]) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("histogram buckets must be in increasing order")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(bounds)
        self.labels = [{"le": floatToGoString(b)} for b in bounds]  # type: ignore[no-untyped-call]
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """Count `amount` in the first bucket whose bound is >= it (Prometheus' `le`)."""
        if amount == amount:  # NaN falls in no bucket (and only spoils the sum), as in prometheus_client
            self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount

    def metric(self) -> Metric:
        family = Metric(self.name, self.documentation, "histogram")
        total = 0.0
        for labels, count in zip(self.labels, self.counts):
            total += count
            family.add_sample(self.name + "_bucket", dict(labels), total)
        family.add_sample(self.name + "_count", {}, total)
        if self.bounds[0] >= 0:  # as prometheus_client: no sum when negative values may cancel out
            family.add_sample(self.name + "_sum", {}, self.sum)
        if _CREATED_SERIES:
            family.add_sample(self.name + "_created", {}, self.created)
        return family


class LoopCounter:
    """A labelled counter incremented from one thread only (the event loop's), without locks.

    `inc` is one dict lookup and one store: a prometheus_client Counter child's `inc` is four
    Python calls and a lock, on every request. `metric()` renders the same samples, in the same
    order and format, as prometheus_client's labelled Counter: per label set, in the order each
    was first counted, `_total` then `_created`.
    """

    __slots__ = ("counts", "created", "documentation", "labelnames", "name")

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.counts: dict[tuple[str, ...], float] = {}  # by label values, in labelnames' order
        self.created: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        count = self.counts.get(labels)
        if count is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.name} takes {len(self.labelnames)} label values, not {len(labels)}")
            self.created[labels] = time.time()
            count = 0.0
        self.counts[labels] = count + amount

    def metric(self) -> Metric:
        family = Metric(self.name, self.documentation, "counter")
        for labels, count in self.counts.items():
            values = dict(zip(self.labelnames, labels))
            family.add_sample(self.name + "_total", values, count)
            if _CREATED_SERIES:
                family.add_sample(self.name + "_created", values, self.created[labels])
        return family


class _HistogramCollector(Collector):
    """Loop-only metrics (histograms, counters) for a registry, rendered at scrape time."""

    def __init__(self, histograms: list[LoopHistogram | LoopCounter]) -> None:
        self.histograms = histograms

    def collect(self) -> Iterator[Metric]:
        for histogram in self.histograms:
            yield histogram.metric()


@dataclass(frozen=True)
class StateView:
    """What the state collector reads at scrape time."""

    in_flight: Callable[[], dict[str, int]]
    ring_members: Callable[[], int]
    load_imbalance: Callable[[], float]
    ejected: Callable[[], int]
    # prefix-cache's index: blocks per member (None: the strategy keeps none) and the cap per member
    prefix_index: Callable[[], Mapping[str, int] | None] = lambda: None
    prefix_index_cap: int = 0
    # precise mode: per member, whether it is routed from its KV events now, and its stream's counters
    kv_streams: Callable[[], Mapping[str, tuple[bool, Mapping[str, int]]]] = lambda: {}
    # precise mode: per member, whether this front is behind on its events (routing.kv_lag)
    kv_behind: Callable[[], Mapping[str, bool]] = lambda: {}
    # precise mode with a model folder: the token store's counters and size (token_store.counts)
    token_store: Callable[[], Mapping[str, int] | None] = lambda: None
    # with --tokenizer: whether it is in use yet, and why not (front.tokenizer_source)
    tokenizer: Callable[[], TokenizerStatus | None] = lambda: None
    # requests waiting for a routable member now, and how holds ended (front.holding)
    held: Callable[[], tuple[int, Mapping[str, int]]] = lambda: (0, {})
    # the other replicas of this front (front.peers), None when it has none
    peers: Callable[[], PeerStatus | None] = lambda: None


class _StateCollector(Collector):
    def __init__(self, view: StateView, prefix: str) -> None:
        self.view = view
        self.prefix = prefix

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        prefix = self.prefix
        in_flight = GaugeMetricFamily(prefix + "in_flight", "Requests open to each member", labels=["member"])
        for member, count in sorted(self.view.in_flight().items()):
            in_flight.add_metric([member], count)
        yield in_flight
        yield GaugeMetricFamily(
            prefix + "ring_members",
            "Members that may receive requests (ready, weight > 0)",
            value=self.view.ring_members(),
        )
        yield GaugeMetricFamily(
            prefix + "load_imbalance",
            "Max over mean of requests in flight across ring members (1 = even)",
            value=self.view.load_imbalance(),
        )
        yield GaugeMetricFamily(prefix + "ejected_members", "Members ejected after failures", value=self.view.ejected())
        held, outcomes = self.view.held()
        yield GaugeMetricFamily(
            prefix + "held_requests",
            "Requests waiting for a routable member (none is ready: a model at zero replicas wakes on these)",
            value=held,
        )
        holds = CounterMetricFamily(
            prefix + "holds",
            "Requests that had to wait for a routable member, by how the wait ended: served, timeout, full",
            labels=["outcome"],
        )
        for outcome in ("served", "timeout", "full"):
            holds.add_metric([outcome], outcomes.get(outcome, 0))
        yield holds
        index = self.view.prefix_index()
        if index is not None:
            blocks = GaugeMetricFamily(
                prefix + "prefix_index_blocks",
                "Prompt blocks the prefix index remembers for each member",
                labels=["member"],
            )
            for member, count in sorted(index.items()):
                blocks.add_metric([member], count)
            yield blocks
            yield GaugeMetricFamily(
                prefix + "prefix_index_capacity_blocks",
                "Most blocks the prefix index remembers per member (--index-blocks)",
                value=self.view.prefix_index_cap,
            )
        streams = self.view.kv_streams()
        if streams:
            yield from _kv_stream_metrics(prefix, streams, self.view.kv_behind())
        store = self.view.token_store()
        if store is not None:
            yield from _token_store_metrics(prefix, store)
        tokenizer = self.view.tokenizer()
        if tokenizer is not None:
            yield from _tokenizer_metrics(prefix, tokenizer)
        peers = self.view.peers()
        if peers is not None:
            yield from _peer_metrics(prefix, peers)


def _kv_stream_metrics(
    prefix: str, streams: Mapping[str, tuple[bool, Mapping[str, float]]], behind_by_member: Mapping[str, bool]
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Precise mode's event streams per member: followed or not, their counts, behind or not."""
    precise = GaugeMetricFamily(
        prefix + "kv_events_precise",
        "1 while a member is routed from its own KV cache events, 0 while from routing history",
        labels=["member"],
    )
    counts = CounterMetricFamily(
        prefix + "kv_events",
        "KV event stream counts per member: messages, events, gaps, replays, replays_failed, resyncs, "
        "restarts, clears, stale, orphaned_blocks, skipped_blocks, malformed, behind, stored_blocks, removed_blocks, "
        "read_natively",
        labels=["member", "kind"],
    )
    for member, (on, counters) in sorted(streams.items()):
        precise.add_metric([member], 1.0 if on else 0.0)
        for kind, value in counters.items():
            counts.add_metric([member, kind], value)
    yield precise
    yield counts
    behind = GaugeMetricFamily(
        prefix + "kv_events_behind",
        "1 while this front applies a member's KV events too late (lag past --kv-events-behind-after, "
        "more waiting) and routes it from history, 0 while it keeps up",
        labels=["member"],
    )
    for member, late in sorted(behind_by_member.items()):
        behind.add_metric([member], 1.0 if late else 0.0)
    yield behind


def _token_store_metrics(prefix: str, counts: Mapping[str, int]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    lookups = CounterMetricFamily(
        prefix + "token_store_lookups",
        "Prompt pieces looked up in the token store: found (hit, not tokenized again) or not (miss, tokenized)",
        labels=["result"],
    )
    lookups.add_metric(["hit"], counts["hits"])
    lookups.add_metric(["miss"], counts["misses"])
    yield lookups
    yield CounterMetricFamily(
        prefix + "token_store_reused_tokens", "Prompt tokens taken from the token store", value=counts["reused_tokens"]
    )
    yield CounterMetricFamily(
        prefix + "token_store_tokenized_tokens",
        "Prompt tokens the tokenizer produced for pieces the store did not hold",
        value=counts["tokenized_tokens"],
    )
    yield GaugeMetricFamily(prefix + "token_store_tokens", "Token ids the token store holds", value=counts["tokens"])
    yield GaugeMetricFamily(
        prefix + "token_store_pieces", "Prompt pieces the token store holds", value=counts["pieces"]
    )
    yield GaugeMetricFamily(
        prefix + "token_store_capacity_tokens",
        "Most token ids the token store holds (--token-store-tokens)",
        value=counts["capacity_tokens"],
    )


def _tokenizer_metrics(prefix: str, status: TokenizerStatus) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    ready = GaugeMetricFamily(
        prefix + "tokenizer_ready",
        "1 while requests are keyed by the engine's tokenizer, 0 while it is being fetched (keys are "
        "approximate meanwhile), by source: engine-sim, folder or hub",
        labels=["source"],
    )
    ready.add_metric([status.source], 1.0 if status.ready else 0.0)
    yield ready
    errors = CounterMetricFamily(
        prefix + "tokenizer_errors",
        "Failed attempts to fetch the tokenizer from the hub, by reason: unauthorized (401/403), not_found (404), "
        "unreachable, invalid",
        labels=["reason"],
    )
    for reason, count in sorted(status.errors.items()):
        errors.add_metric([reason], count)
    yield errors
    if status.failing is not None:
        failing = GaugeMetricFamily(
            prefix + "tokenizer_failing",
            "1 for the reason the latest attempt to fetch the tokenizer failed, while there is none",
            labels=["reason"],
        )
        failing.add_metric([status.failing], 1.0)
        yield failing


def _peer_metrics(prefix: str, status: PeerStatus) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    yield GaugeMetricFamily(
        prefix + "peers", "Other replicas counted now (heard from within --peer-silence)", value=status.heard
    )
    yield GaugeMetricFamily(prefix + "peer_endpoints", "Other replicas' report streams followed", value=status.followed)
    reports = CounterMetricFamily(
        prefix + "peer_reports",
        "Peer reports: reports (received), gaps, restarts, expired, routed (requests learned from peers), foreign "
        "(history keyed otherwise, ignored), malformed, sent, send_dropped, dropped (history that did not fit)",
        labels=["kind"],
    )
    for kind, value in sorted(status.counts.items()):
        reports.add_metric([kind], value)
    yield reports
    loads = GaugeMetricFamily(
        prefix + "peer_in_flight", "Requests the other replicas have in flight to each member", labels=["member"]
    )
    for member, (requests, _, _) in sorted(status.loads.items()):
        loads.add_metric([member], requests)
    yield loads


class _RecentCollector(Collector):
    """The last minute's figures (front.recent), absent while unknown."""

    def __init__(self, metrics: FrontMetrics, prefix: str) -> None:
        self.metrics, self.prefix = metrics, prefix

    def collect(self) -> Iterator[GaugeMetricFamily]:
        m, prefix = self.metrics, self.prefix
        yield GaugeMetricFamily(
            prefix + "recent_requests",
            "Requests whose first byte went out in the last minute",
            value=len(m.recent_ttfb.values()),
        )
        p50 = m.recent_ttfb.median()
        if p50 is not None:
            yield GaugeMetricFamily(
                prefix + "recent_ttfb_p50_seconds", "Median time to first byte over the last minute", value=p50
            )
        engines = m.recent_engines.hit_rate()
        estimate = m.recent_match.mean()
        if engines is not None or estimate is not None:
            family = GaugeMetricFamily(
                prefix + "recent_hit_rate",
                "Prefix cache hit rate over the last minute: the engines' (source=engines, from their counters "
                "as scraped) or the front's estimate (source=estimate, prefix-cache's index)",
                labels=["source"],
            )
            if engines is not None:
                family.add_metric(["engines"], engines)
            if estimate is not None:
                family.add_metric(["estimate"], estimate)
            yield family


class FrontMetrics:
    """The metrics of one front; `prefix` names the front (`prefixroute_router_`)."""

    prefix = "prefixroute_"

    def __init__(self, strategy: str) -> None:
        prefix = self.prefix
        self.strategy = strategy
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = LoopCounter(
            prefix + "requests",
            "Requests answered, by member, strategy and HTTP status",
            ["member", "strategy", "status"],
        )
        r.register(_HistogramCollector([self.requests]))
        self.ttfb = LoopHistogram(
            prefix + "time_to_first_byte_seconds",
            "From request received to the first response byte relayed",
            _LATENCY_BUCKETS,
        )
        self.duration = LoopHistogram(
            prefix + "request_duration_seconds",
            "From request received to the last byte relayed",
            _LATENCY_BUCKETS,
        )
        self.match_ratio = LoopHistogram(
            prefix + "prefix_match_ratio",
            "Blocks of the prompt the chosen member is believed to hold, over all blocks",
            _RATIO_BUCKETS,
        )
        self.decision = LoopHistogram(
            prefix + "decision_seconds",
            "Time to canonicalise, hash and choose a member",
            _DECISION_BUCKETS,
        )
        # Predicted TTFT against what the engine delivered (routing.ttft), both timed from the
        # decision to the first byte, for requests routed once the member's speed was known.
        self.ttft_predicted = LoopHistogram(
            prefix + "ttft_predicted_seconds", "TTFT predicted for the chosen member at the decision", _LATENCY_BUCKETS
        )
        self.ttft_delivered = LoopHistogram(
            prefix + "ttft_delivered_seconds",
            "TTFT the member delivered (decision to first byte), for requests with a prediction",
            _LATENCY_BUCKETS,
        )
        self.ttft_ratio = LoopHistogram(
            prefix + "ttft_prediction_ratio",
            "Delivered over predicted TTFT (1: exact; above 1: the prediction was optimistic)",
            _PREDICTION_BUCKETS,
        )
        timings = [self.ttfb, self.duration, self.match_ratio, self.decision]
        r.register(_HistogramCollector([*timings, self.ttft_predicted, self.ttft_delivered, self.ttft_ratio]))
        self._objectives = Counter(
            prefix + "ttft_objectives",
            "Requests with a TTFT objective, by outcome: met or missed (delivered against it), best_effort "
            "(no member was predicted to meet it)",
            ["outcome"],
            registry=r,
        )
        self.peer_lag = LoopHistogram(
            prefix + "peer_report_lag_seconds",
            "From a peer's report leaving (its clock) to its arrival here (ours)",
            _LAG_BUCKETS,
        )
        self.kv_event_lag = LoopHistogram(
            prefix + "kv_event_lag_seconds",
            "From an engine publishing a KV event message (its clock) to this front applying it (ours), live messages",
            _EVENT_LAG_BUCKETS,
        )
        # the last minute's figures, for the operator's status columns (front.recent)
        self.recent_ttfb = RecentValues()
        self.recent_match = RecentValues()
        self.recent_engines = RecentCounters()
        self._ejections = Counter(prefix + "ejections", "Members ejected after a failure", ["member"], registry=r)
        # only a front that sends requests itself (the router) moves one to another member
        self._retries = Counter(prefix + "retries", "Attempts moved to another member", ["reason"], registry=r)
        # Labels stay bounded: an adapter a member lists by name, any other "other" (front.adapters).
        self._adapters = Counter(prefix + "adapter_requests", _ADAPTER_HELP, ["adapter", "resident"], registry=r)

    def watch_peers(self) -> None:
        """This front has peers: export the lag of their reports too."""
        self.registry.register(_HistogramCollector([self.peer_lag]))

    def watch_kv_events(self) -> None:
        """This front follows the engines' KV events: export their lag too."""
        self.registry.register(_HistogramCollector([self.kv_event_lag]))

    def attach_state(self, view: StateView) -> None:
        self.registry.register(_RecentCollector(self, self.prefix))
        self.registry.register(_StateCollector(view, self.prefix))

    def request_done(self, member: str, status: int) -> None:
        self.requests.inc((member, self.strategy, str(status)))

    def first_byte(self, seconds: float) -> None:
        """A request's first byte went out ``seconds`` after it arrived."""
        self.ttfb.observe(seconds)
        self.recent_ttfb.add(seconds)

    def ttft(self, predicted: float | None, delivered: float | None) -> None:
        """The chosen member's predicted TTFT and the one it delivered (either may be unknown)."""
        if predicted is None or delivered is None:
            return
        self.ttft_predicted.observe(predicted)
        self.ttft_delivered.observe(delivered)
        if predicted > 0:
            self.ttft_ratio.observe(delivered / predicted)

    def objective(self, outcome: str) -> None:
        """A request with a TTFT objective: "met", "missed" or "best_effort"."""
        self._objectives.labels(outcome).inc()

    def matched(self, ratio: float) -> None:
        """The chosen member is believed to hold ``ratio`` of the prompt's blocks."""
        self.match_ratio.observe(ratio)
        self.recent_match.add(ratio)

    def adapter_routed(self, adapter: str, resident: bool | None) -> None:
        """A request for `adapter` (a bounded label) was routed; `resident`: believed in a slot there."""
        self._adapters.labels(adapter, _RESIDENT[resident]).inc()

    def ejected(self, member: str) -> None:
        self._ejections.labels(member).inc()

    def retry(self, reason: str) -> None:
        self._retries.labels(reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
