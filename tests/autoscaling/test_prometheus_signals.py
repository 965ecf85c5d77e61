"""read_signals over a fake query edge; the real Prometheus is exercised by the e2e suite."""

import json
import shutil
import subprocess

import pytest

from prefixroute.autoscaling.prometheus_signals import MetricsUnavailable, read_signals
from prefixroute.autoscaling.queries import engine_queries, pod_selector


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
    with pytest.raises(MetricsUnavailable, match="no ready engine pods"):
        read_signals(fake(GOOD), "ns", [], [], now=FRESH)


def test_selector_escapes_pod_names_and_matches_nothing_when_empty():
    # PromQL strings take Go's escapes: the regex's backslash is doubled (a single one, as
    # this test once pinned, is "unknown escape sequence" to a real Prometheus)
    assert pod_selector("ns", ["a.b"]) == 'namespace="ns",pod=~"a\\\\.b"'
    assert 'pod=~"$^"' in pod_selector("ns", [])
    assert "gpu_cache_usage_perc" in engine_queries("x", "1m")["kv_usage"]


def test_a_pod_that_just_turned_ready_may_lack_series_but_no_other_may() -> None:
    values = {**GOOD, "num_requests_running": [series("e0", 5)], "num_requests_waiting": [series("e0", 3)]}
    s = read_signals(fake(values), "ns", ["e0", "e1"], [], now=FRESH, young=["e1"])
    assert [m.name for m in s.members] == ["e0"]
    with pytest.raises(MetricsUnavailable) as caught:
        read_signals(fake(values), "ns", ["e0", "e1"], [], now=FRESH, young=["e0"])
    assert caught.value.reason == "MetricsMissing"
    with pytest.raises(MetricsUnavailable, match="no engine pod has been scraped"):
        read_signals(fake({}), "ns", ["e1"], [], now=FRESH, young=["e1"])


def test_each_fault_has_a_reason_for_the_condition() -> None:
    for run, reason in (
        (lambda: read_signals(fake(GOOD), "ns", [], [], now=FRESH), "NoEnginePods"),
        (lambda: read_signals(fake(GOOD), "ns", ["e0", "e1"], [], now=FRESH + 600), "MetricsStale"),
    ):
        with pytest.raises(MetricsUnavailable) as caught:
            run()
        assert caught.value.reason == reason


def test_the_reader_derives_windows_from_the_settings_and_keeps_one_client_per_url() -> None:
    from prefixroute.autoscaling.prometheus_signals import PrometheusReader
    from prefixroute.autoscaling.settings import AutoscalingSettings

    seen, made = [], []

    def make(url, timeout, verify):
        made.append(url)
        assert verify is True  # no trust given: https is checked against the public CAs

        def run(q):
            seen.append(q)
            return fake(GOOD)(q)

        return run

    reader = PrometheusReader(make_query=make)
    settings = AutoscalingSettings(
        enabled=True,
        prometheus="http://p:9090",
        scale_up_window_seconds=10,
        scale_down_window_seconds=16,
        interval_seconds=2,
    )
    reader(settings, "ns", ["e0", "e1"], ["r0"], [], FRESH)
    reader(settings, "ns", ["e0", "e1"], ["r0"], [], FRESH)
    assert made == ["http://p:9090"]
    assert any("prefix_cache_hits_total" in q and "[32s]" in q for q in seen)
    assert any("time_to_first_token_seconds_bucket" in q and "[10s]" in q for q in seen)
    with pytest.raises(
        MetricsUnavailable, match=r"set spec\.autoscaling\.prometheus, or start the operator with --prometheus-url"
    ):
        reader(AutoscalingSettings(enabled=True), "ns", ["e0"], [], [], FRESH)


def test_the_operators_default_url_serves_specs_that_name_none() -> None:
    from prefixroute.autoscaling.prometheus_signals import PrometheusReader
    from prefixroute.autoscaling.settings import AutoscalingSettings

    made = []
    reader = PrometheusReader(
        make_query=lambda url, timeout, verify: made.append(url) or fake(GOOD), default_url="http://default:9090"
    )
    reader(AutoscalingSettings(enabled=True), "ns", ["e0", "e1"], [], [], FRESH)
    reader(AutoscalingSettings(enabled=True, prometheus="http://own:9090"), "ns", ["e0", "e1"], [], [], FRESH)
    assert made == ["http://default:9090", "http://own:9090"]


def test_the_reader_asks_trust_how_to_verify_and_keeps_a_client_per_way() -> None:
    """A model's prometheusTLS decides ``verify``; a CA rotated into a new bundle file gets a
    client of its own, and a CA that cannot be read fails the read before any query."""
    from prefixroute.autoscaling.prometheus_signals import CA_UNAVAILABLE, PrometheusReader
    from prefixroute.autoscaling.settings import AutoscalingSettings, CAReference, PrometheusTLS

    made, asked = [], []
    bundle = {"path": "/tmp/ca-1.pem"}

    def trust(namespace, tls):
        asked.append((namespace, tls))
        if tls is None:
            return True
        if tls.insecure_skip_verify:
            return False
        if bundle["path"] is None:
            raise MetricsUnavailable("the Prometheus CA's Secret ns/ca does not exist", CA_UNAVAILABLE)
        return bundle["path"]

    reader = PrometheusReader(make_query=lambda url, timeout, verify: made.append(verify) or fake(GOOD), trust=trust)
    url = "https://p:9090"
    tls = PrometheusTLS(ca=CAReference("Secret", "ca"))
    settings = AutoscalingSettings(enabled=True, prometheus=url, prometheus_tls=tls)
    for _ in range(2):
        reader(settings, "ns", ["e0", "e1"], [], [], FRESH)
    bundle["path"] = "/tmp/ca-2.pem"
    reader(settings, "ns", ["e0", "e1"], [], [], FRESH)
    insecure = AutoscalingSettings(
        enabled=True, prometheus=url, prometheus_tls=PrometheusTLS(insecure_skip_verify=True)
    )
    reader(insecure, "ns", ["e0", "e1"], [], [], FRESH)
    reader(AutoscalingSettings(enabled=True, prometheus=url), "ns", ["e0", "e1"], [], [], FRESH)
    assert made == ["/tmp/ca-1.pem", "/tmp/ca-2.pem", False, True]
    assert asked[0] == ("ns", tls)
    bundle["path"] = None
    with pytest.raises(MetricsUnavailable) as caught:
        reader(settings, "ns", ["e0", "e1"], [], [], FRESH)
    assert caught.value.reason == CA_UNAVAILABLE and len(made) == 4


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not found")
def test_every_query_parses_as_promql(tmp_path):
    """promtool parses each expression the way the Prometheus server does."""
    from prefixroute.autoscaling.queries import fleet_queries

    selector = pod_selector("e2e-ns", ["auto-engine-6589b8b68f-2hftv", "a.b"])
    exprs = list(engine_queries(selector, "10s", "32s").values()) + list(
        fleet_queries(selector, pod_selector("ns", []), "10s").values()
    )
    rules = {"groups": [{"name": "autoscaler", "rules": [{"record": f"q{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.yaml"
    path.write_text(json.dumps(rules))
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_at_zero_engines_a_model_that_may_rest_there_reads_what_its_routers_hold() -> None:
    asked = []

    def run(q):
        asked.append(q)
        if "held_requests" in q:
            return [{"metric": {}, "value": [0, "2"]}]
        if "holds_total" in q:
            return [{"metric": {}, "value": [0, "1"]}]
        return []

    signals = read_signals(run, "ns", [], ["r0"], now=FRESH, at_zero=True)
    assert signals.members == () and signals.held == 3 and not signals.idle
    assert all('pod=~"r0"' in q for q in asked) and any('outcome=~"timeout|full"' in q for q in asked)
    with pytest.raises(MetricsUnavailable, match="no ready engine pods"):
        read_signals(run, "ns", [], ["r0"], now=FRESH)  # a fleet that cannot rest at zero is starting


def test_a_serving_fleet_reads_held_requests_too() -> None:
    values = {**GOOD, "held_requests": [{"metric": {}, "value": [0, "4"]}]}
    assert read_signals(fake(values), "ns", ["e0", "e1"], ["r0"], now=FRESH).held == 4
