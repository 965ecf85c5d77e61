"""The fronts' metrics: LoopHistogram renders exactly what prometheus_client's Histogram does."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.front.metrics import (
    _DECISION_BUCKETS,
    _LATENCY_BUCKETS,
    _RATIO_BUCKETS,
    LoopCounter,
    LoopHistogram,
    StateView,
    _HistogramCollector,
)
from prefixroute.front.tokenizer_source import TokenizerStatus
from prefixroute.router.metrics import PREFIX, RouterMetrics

_CREATED = re.compile(rb"^(\S+_created) \S+$", re.MULTILINE)
_LABELLED_CREATED = re.compile(rb"^(\S+_created\{[^}]*\}) \S+$", re.MULTILINE)  # label values without spaces


def _both(buckets: tuple[float, ...], values: list[float]) -> tuple[bytes, bytes]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("h_seconds", "a histogram", buckets=buckets, registry=theirs)
    loop = LoopHistogram("h_seconds", "a histogram", buckets)
    ours.register(_HistogramCollector([loop]))
    for value in values:
        reference.observe(value)
        loop.observe(value)
    # the creation time is the only thing that may differ
    return _CREATED.sub(rb"\1 T", generate_latest(theirs)), _CREATED.sub(rb"\1 T", generate_latest(ours))


edges = st.sampled_from([*_LATENCY_BUCKETS, *_RATIO_BUCKETS, *_DECISION_BUCKETS, 0.0, math.inf, math.nan])
amounts = st.one_of(edges, st.floats(min_value=0, max_value=400, allow_nan=False))


@given(
    values=st.lists(amounts, max_size=40),
    buckets=st.sampled_from([_LATENCY_BUCKETS, _RATIO_BUCKETS, _DECISION_BUCKETS]),
)
def test_same_text_as_prometheus_client(values: list[float], buckets: tuple[float, ...]) -> None:
    theirs, ours = _both(buckets, values)
    assert ours == theirs


def test_same_text_with_an_explicit_inf_bucket() -> None:
    theirs, ours = _both((0.1, 0.5, math.inf), [0.1, 0.3, 7.0])
    assert ours == theirs


@given(counts=st.lists(st.tuples(st.sampled_from(["a", "b", 'q"\\n']), st.sampled_from(["200", "503"])), max_size=30))
def test_loop_counter_renders_what_prometheus_clients_counter_does(counts: list[tuple[str, str]]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Counter("c", "a counter", ["member", "status"], registry=theirs)
    loop = LoopCounter("c", "a counter", ["member", "status"])
    ours.register(_HistogramCollector([loop]))
    for labels in counts:
        reference.labels(*labels).inc()
        loop.inc(labels)
    # the creation times are the only thing that may differ
    assert _LABELLED_CREATED.sub(rb"\1 T", generate_latest(ours)) == _LABELLED_CREATED.sub(
        rb"\1 T", generate_latest(theirs)
    )


def test_loop_counter_refuses_the_wrong_number_of_label_values() -> None:
    with pytest.raises(ValueError, match="takes 2 label values, not 1"):
        LoopCounter("c", "a counter", ["member", "status"]).inc(("a",))


def test_buckets_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="increasing"):
        LoopHistogram("h", "h", (0.5, 0.1))


def test_router_metrics_expose_every_family_in_order() -> None:
    metrics = RouterMetrics("prefix-cache")
    metrics.attach_state(
        StateView(in_flight=lambda: {"m": 2}, ring_members=lambda: 1, load_imbalance=lambda: 1.0, ejected=lambda: 0)
    )
    metrics.ttfb.observe(0.002)
    metrics.duration.observe(0.003)
    metrics.decision.observe(3e-5)
    metrics.match_ratio.observe(0.75)
    metrics.request_done("m", 200)
    metrics.retry("status")
    parsed = text_string_to_metric_families(metrics.render().decode())
    families = {f.name: f for f in parsed if not f.name.endswith("_created")}
    assert list(families)[:11] == [
        PREFIX + "requests",
        PREFIX + "time_to_first_byte_seconds",
        PREFIX + "request_duration_seconds",
        PREFIX + "prefix_match_ratio",
        PREFIX + "decision_seconds",
        PREFIX + "ttft_predicted_seconds",
        PREFIX + "ttft_delivered_seconds",
        PREFIX + "ttft_prediction_ratio",
        PREFIX + "ttft_objectives",
        PREFIX + "ejections",
        PREFIX + "retries",
    ]
    ratio = {
        s.labels.get("le"): s.value
        for s in families[PREFIX + "prefix_match_ratio"].samples
        if s.name.endswith("_bucket")
    }
    assert ratio["0.7"] == 0
    assert ratio["0.8"] == 1
    assert ratio["+Inf"] == 1
    ttfb = {s.name: s.value for s in families[PREFIX + "time_to_first_byte_seconds"].samples if "le" not in s.labels}
    assert ttfb[PREFIX + "time_to_first_byte_seconds_count"] == 1
    assert ttfb[PREFIX + "time_to_first_byte_seconds_sum"] == 0.002


def test_the_last_minutes_figures_are_gauges_for_the_status_columns() -> None:
    now = [100.0]
    metrics = RouterMetrics("prefix-cache")
    for recent in (metrics.recent_ttfb, metrics.recent_match, metrics.recent_engines):
        recent.clock = lambda: now[0]
    metrics.attach_state(
        StateView(in_flight=lambda: {}, ring_members=lambda: 1, load_imbalance=lambda: 1.0, ejected=lambda: 0)
    )

    def gauges() -> dict[tuple[str, str], float]:
        families = text_string_to_metric_families(metrics.render().decode())
        return {
            (s.name.removeprefix(PREFIX), s.labels.get("source", "")): s.value
            for f in families
            if f.name.startswith(PREFIX + "recent_")
            for s in f.samples
        }

    assert gauges() == {("recent_requests", ""): 0}  # nothing known: no p50, no hit rate
    for seconds in (0.1, 0.3, 0.2):
        metrics.first_byte(seconds)
    metrics.matched(0.5)
    metrics.matched(0.7)
    metrics.recent_engines.report("e0", hits=100, queries=400)
    now[0] += 30
    metrics.recent_engines.report("e0", hits=400, queries=1000)  # 300 of 600 in the window
    found = gauges()
    assert found[("recent_requests", "")] == 3
    assert found[("recent_ttfb_p50_seconds", "")] == 0.2
    assert found[("recent_hit_rate", "engines")] == 0.5
    assert found[("recent_hit_rate", "estimate")] == 0.6
    now[0] += 61  # a minute later, nothing new
    assert gauges() == {("recent_requests", ""): 0}


def test_the_token_store_is_counted_when_precise_mode_keeps_one() -> None:
    metrics = RouterMetrics("prefix-cache")
    counts = {"hits": 5, "misses": 2, "reused_tokens": 900, "tokenized_tokens": 80, "tokens": 980, "pieces": 7,
              "capacity_tokens": 1024}  # fmt: skip
    view = StateView(lambda: {}, lambda: 1, lambda: 1.0, lambda: 0, token_store=lambda: counts)
    metrics.attach_state(view)
    samples = {
        (s.name, s.labels.get("result")): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
    }
    assert samples[(PREFIX + "token_store_lookups_total", "hit")] == 5
    assert samples[(PREFIX + "token_store_lookups_total", "miss")] == 2
    assert samples[(PREFIX + "token_store_reused_tokens_total", None)] == 900
    assert samples[(PREFIX + "token_store_tokenized_tokens_total", None)] == 80
    assert samples[(PREFIX + "token_store_tokens", None)] == 980
    assert samples[(PREFIX + "token_store_pieces", None)] == 7
    assert samples[(PREFIX + "token_store_capacity_tokens", None)] == 1024


def _tokenizer_samples(status: TokenizerStatus | None) -> dict[tuple[str, str], float]:
    metrics = RouterMetrics("prefix-cache")
    metrics.attach_state(StateView(lambda: {}, lambda: 1, lambda: 1.0, lambda: 0, tokenizer=lambda: status))
    return {
        (s.name.removeprefix(PREFIX), ",".join(s.labels.values())): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.name.startswith(PREFIX + "tokenizer_")
    }


def test_the_tokenizer_says_whether_it_is_in_use_and_why_not() -> None:
    assert _tokenizer_samples(None) == {}  # no --tokenizer: nothing to say
    errors = {"unauthorized": 3, "not_found": 0, "unreachable": 1, "invalid": 0}
    failing = _tokenizer_samples(TokenizerStatus("hub", False, errors, "unauthorized", "acme/m: refused"))
    assert failing == {
        ("tokenizer_ready", "hub"): 0.0,
        ("tokenizer_errors_total", "invalid"): 0,
        ("tokenizer_errors_total", "not_found"): 0,
        ("tokenizer_errors_total", "unauthorized"): 3,
        ("tokenizer_errors_total", "unreachable"): 1,
        ("tokenizer_failing", "unauthorized"): 1.0,
    }
    ready = _tokenizer_samples(TokenizerStatus("hub", True, errors))
    assert ready[("tokenizer_ready", "hub")] == 1.0
    assert ("tokenizer_failing", "unauthorized") not in ready
