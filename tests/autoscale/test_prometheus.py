"""read_signals over a fake query edge; the real Prometheus is exercised by the e2e suite."""

import pytest

from prefixroute.autoscale.prometheus import MetricsUnavailable, prometheus_query, read_signals
from prefixroute.autoscale.queries import engine_queries, pod_selector


def series(pod, value):
    return {"metric": {"pod": pod}, "value": [0, str(value)]}


def fake(values):
    """A query function answering by the first keyword each query contains."""

    def run(q):
        for needle, result in values.items():
            if needle in q:
                return result
        return []

    return run


FRESH = 1000.0
GOOD = {
    "timestamp(": [series("e0", FRESH - 2), series("e1", FRESH - 3)],
    "num_requests_waiting": [series("e0", 3), series("e1", 0)],
    "num_requests_running": [series("e0", 5), series("e1", 1)],
    "kv_cache_usage_perc": [series("e0", 0.5), series("e1", 0.1)],
    "prefix_cache_hits_total": [series("e0", 300), series("e1", 50)],
    "prefix_cache_queries_total": [series("e0", 400), series("e1", 200)],
    "e2e_request_latency_seconds_count": [series("e0", 2), series("e1", 1)],
    "histogram_quantile(0.5": [{"metric": {}, "value": [0, "0.25"]}],
    "histogram_quantile(0.9": [{"metric": {}, "value": [0, "NaN"]}],
}


def test_signals_per_pod_and_for_the_fleet():
    s = read_signals(fake(GOOD), "ns", ["e0", "e1"], ["r0"], now=FRESH)
    e0 = s.member("e0")
    assert (e0.waiting, e0.running, e0.kv_usage, e0.hit_rate) == (3, 5, 0.5, 0.75)
    assert s.ttft_p50 == 0.25 and s.ttft_p90 is None and s.router_imbalance is None
    assert s.hit_rate == pytest.approx(350 / 600)


def test_missing_engine_metrics_name_the_pods():
    values = {**GOOD, "num_requests_running": [series("e0", 5)]}
    with pytest.raises(MetricsUnavailable, match="e1"):
        read_signals(fake(values), "ns", ["e0", "e1"], [], now=FRESH)


def test_stale_metrics_are_not_used():
    with pytest.raises(MetricsUnavailable, match="older than"):
        read_signals(fake(GOOD), "ns", ["e0", "e1"], [], now=FRESH + 600)


def test_no_pods_is_a_clear_error():
    with pytest.raises(MetricsUnavailable, match="no engine pods"):
        read_signals(fake(GOOD), "ns", [], [], now=FRESH)


def test_unreachable_prometheus_is_metrics_unavailable():
    query = prometheus_query("http://127.0.0.1:9", timeout_seconds=1)
    with pytest.raises(MetricsUnavailable, match="127.0.0.1:9"):
        query("up")


def test_selector_escapes_pod_names_and_matches_nothing_when_empty():
    assert pod_selector("ns", ["a.b"]) == 'namespace="ns",pod=~"a\\.b"'
    assert 'pod=~"$^"' in pod_selector("ns", [])
    assert "gpu_cache_usage_perc" in engine_queries("x", "1m")["kv_usage"]
