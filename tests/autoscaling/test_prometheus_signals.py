"""read_signals and read_fleets over a fake query edge; the real Prometheus is exercised by the
e2e suite, the queries by promtool (tests/autoscaling/test_queries.py)."""

import json
import shutil
import subprocess

import pytest

from prefixroute.autoscaling.prometheus_signals import (
    FleetRequest,
    MetricsUnavailable,
    PrometheusReader,
    SignalsRequest,
    read_fleets,
    read_signals,
)
from prefixroute.autoscaling.queries import (
    FLEET_LABEL,
    engine_queries,
    fleets_ttft_queries,
    pod_selector,
    routers_queries,
)
from prefixroute.autoscaling.settings import AutoscalingSettings


def series(pod, value, namespace="ns"):
    return {"metric": {"namespace": namespace, "pod": pod}, "value": [0, str(value)]}


def fleet(i, value):
    return {"metric": {FLEET_LABEL: str(i)}, "value": [0, str(value)]}


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
    "histogram_quantile(0.5": [fleet(0, 0.25)],
    "histogram_quantile(0.9": [fleet(0, "NaN")],
}


def test_signals_per_pod_and_for_the_fleet():
    s = read_signals(fake(GOOD), "ns", ["e0", "e1"], ["r0"], now=FRESH)
    e0 = s.member("e0")
    assert (e0.waiting, e0.running, e0.kv_usage, e0.hit_rate) == (3, 5, 0.5, 0.75)
    assert s.ttft_p50 == 0.25
    assert s.ttft_p90 is None
    assert s.router_imbalance is None
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


def request(settings, engines=("e0", "e1"), routers=("r0",), namespace="ns"):
    return SignalsRequest(settings, namespace, tuple(engines), tuple(routers))


def test_the_reader_derives_windows_from_the_settings_and_keeps_one_client_per_url() -> None:
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
    reader([request(settings)], FRESH)
    reader([request(settings)], FRESH)
    assert made == ["http://p:9090"]
    assert any("prefix_cache_hits_total" in q and "[32s]" in q for q in seen)
    assert any("time_to_first_token_seconds_bucket" in q and "[10s]" in q for q in seen)
    (missing,) = reader([request(AutoscalingSettings(enabled=True), ["e0"], [])], FRESH)
    assert isinstance(missing, MetricsUnavailable)
    assert "set spec.autoscaling.prometheus, or start the operator with --prometheus-url" in str(missing)


def test_the_operators_default_url_serves_specs_that_name_none() -> None:
    made = []
    reader = PrometheusReader(
        make_query=lambda url, timeout, verify: made.append(url) or fake(GOOD), default_url="http://default:9090"
    )
    reader([request(AutoscalingSettings(enabled=True))], FRESH)
    reader([request(AutoscalingSettings(enabled=True, prometheus="http://own:9090"))], FRESH)
    assert made == ["http://default:9090", "http://own:9090"]


def test_models_of_one_prometheus_and_windows_are_read_in_one_batch() -> None:
    """A dozen queries for any number of models: per-pod series of their namespaces, and one
    TTFT query per quantile holding every model; each model gets its own pods' figures."""
    asked = []

    def run(q):
        asked.append(q)
        if "histogram_quantile(0.5" in q:
            return [fleet(0, 0.25), fleet(1, 0.5)]
        if "timestamp(" in q:
            return [series(p, FRESH - 1, ns) for ns, p in (("a", "e0"), ("b", "e0"), ("b", "e1"), ("a", "x"))]
        if "num_requests_waiting" in q:
            return [series("e0", 1, "a"), series("e0", 2, "b"), series("e1", 3, "b"), series("x", 9, "a")]
        if "num_requests_running" in q or "held_requests" in q:
            return [series(p, 1, ns) for ns, p in (("a", "e0"), ("b", "e0"), ("b", "e1"), ("a", "x"), ("b", "r"))]
        return []

    settings = AutoscalingSettings(enabled=True, prometheus="http://p:9090")
    slower = AutoscalingSettings(enabled=True, prometheus="http://p:9090", scale_up_window_seconds=120)
    reader = PrometheusReader(make_query=lambda url, timeout, verify: run)
    requests = [request(settings, ["e0"], [], "a"), request(settings, ["e0", "e1"], ["r"], "b")]
    a, b, alone = reader([*requests, request(slower, ["e1"], [], "b")], FRESH)
    # two batches (two windows), each a query per signal, not per model: 7 per-pod engine
    # signals, 3 router ones (not in the second batch: no routers there), 2 TTFT quantiles
    assert len(asked) == (7 + 3 + 2) + (7 + 2)
    assert [m.waiting for m in a.members] == [1]
    assert [m.waiting for m in b.members] == [2, 3]
    assert (a.ttft_p50, b.ttft_p50, alone.ttft_p50) == (0.25, 0.5, 0.25)
    assert (a.held, b.held) == (0, 1)  # router r of model b only
    assert 'namespace=~"a|b"' in asked[0]


def test_a_fault_of_one_model_is_its_own_and_a_failed_query_fails_the_batch() -> None:
    values = {**GOOD, "num_requests_running": [series("e0", 5)]}
    ok, missing = read_fleets(fake(values), [FleetRequest("ns", ("e0",)), FleetRequest("ns", ("e0", "e1"))], FRESH)
    assert ok.members[0].running == 5
    assert isinstance(missing, MetricsUnavailable)
    assert "e1" in str(missing)

    def down(q):
        raise MetricsUnavailable("Prometheus at http://p failed: ConnectionError")

    found = read_fleets(down, [FleetRequest("ns", ("e0",)), FleetRequest("other", ("x",))], FRESH)
    assert [str(f) for f in found] == ["Prometheus at http://p failed: ConnectionError"] * 2


def test_ttft_queries_come_in_chunks_tagged_by_place() -> None:
    from prefixroute.autoscaling import queries

    asked = []

    def run(q):
        asked.append(q)
        if "histogram_quantile(0.5" in q:
            return [fleet(i, float(i)) for i in range(q.count("label_replace("))]
        return fake(GOOD)(q)

    fleets = [FleetRequest("ns", ("e0",)) for _ in range(queries.CHUNK + 3)]
    found = read_fleets(run, fleets, FRESH)
    assert [f.ttft_p50 for f in found] == [float(i) for i in range(queries.CHUNK)] + [0.0, 1.0, 2.0]
    assert sum("histogram_quantile" in q for q in asked) == 4  # two chunks, two quantiles


def test_the_reader_asks_trust_how_to_verify_and_keeps_a_client_per_way() -> None:
    """A model's prometheusTLS decides ``verify``; a CA rotated into a new bundle file gets a
    client of its own, and a CA that cannot be read fails its model before any query, and
    only its model: the others of the round are read as usual."""
    from prefixroute.autoscaling.prometheus_signals import CA_UNAVAILABLE
    from prefixroute.autoscaling.settings import CAReference, PrometheusTLS

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
        reader([request(settings)], FRESH)
    bundle["path"] = "/tmp/ca-2.pem"
    reader([request(settings)], FRESH)
    insecure = AutoscalingSettings(
        enabled=True, prometheus=url, prometheus_tls=PrometheusTLS(insecure_skip_verify=True)
    )
    reader([request(insecure)], FRESH)
    plain = AutoscalingSettings(enabled=True, prometheus=url)
    reader([request(plain)], FRESH)
    assert made == ["/tmp/ca-1.pem", "/tmp/ca-2.pem", False, True]
    assert asked[0] == ("ns", tls)
    bundle["path"] = None
    failed, served = reader([request(settings), request(plain)], FRESH)
    assert isinstance(failed, MetricsUnavailable)
    assert failed.reason == CA_UNAVAILABLE
    assert not isinstance(served, MetricsUnavailable)
    assert len(made) == 4


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not found")
def test_every_query_parses_as_promql(tmp_path):
    """promtool parses each expression the way the Prometheus server does."""
    from prefixroute.autoscaling.queries import namespace_selector

    selector = pod_selector("e2e-ns", ["auto-engine-6589b8b68f-2hftv", "a.b"])
    namespaces = namespace_selector(["e2e-ns", "a.b"])
    exprs = [
        *engine_queries(namespaces, "10s", "32s").values(),
        *routers_queries(namespaces, "10s").values(),
        *fleets_ttft_queries([selector, pod_selector("ns", [])], "10s").values(),
    ]
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
            return [series("r0", 2), series("r1", 5, "other")]
        if "holds_total" in q:
            return [series("r0", 1)]
        return []

    signals = read_signals(run, "ns", [], ["r0"], now=FRESH, at_zero=True)
    assert signals.members == ()
    assert signals.held == 3
    assert not signals.idle
    assert len(asked) == 3
    assert any('outcome=~"timeout|full"' in q for q in asked)  # the routers' queries only
    with pytest.raises(MetricsUnavailable, match="no ready engine pods"):
        read_signals(run, "ns", [], ["r0"], now=FRESH)  # a fleet that cannot rest at zero is starting


def test_a_serving_fleet_reads_held_requests_too() -> None:
    values = {**GOOD, "held_requests": [series("r0", 4)]}
    assert read_signals(fake(values), "ns", ["e0", "e1"], ["r0"], now=FRESH).held == 4


def test_a_batch_is_two_steps_of_queries_that_may_go_out_side_by_side() -> None:
    from prefixroute.autoscaling import prometheus_signals, queries

    assert set(prometheus_signals.ENGINE_SIGNALS) == set(queries.engine_queries("", "", ""))
    assert set(prometheus_signals.ROUTER_SIGNALS) == set(queries.routers_queries("", ""))
    steps = []

    def run(query, asked):
        steps.append(len(asked))
        return map(query, asked)

    fleets = [FleetRequest("ns", ("e0", "e1"), ("r0",)) for _ in range(queries.CHUNK + 1)]
    found = read_fleets(fake(GOOD), fleets, FRESH, run=run)
    assert steps == [7 + 3, 2 * 2]  # per-pod signals, then two chunks of fleets, two quantiles each
    assert all(f.ttft_p50 == 0.25 for f in found[:1])
