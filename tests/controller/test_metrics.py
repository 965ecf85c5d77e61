"""The operator's own metrics: labelled by model, absent while unknown, gone with the model;
and its /metrics, a page rendered at most once every PAGE_MAX_AGE seconds."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from prefixroute.controller.metrics import OperatorMetrics, RenderedPage, serve

P = "prefixroute_operator_"
LLAMA = {"model_namespace": "serving", "model": "llama"}
QWEN = {"model_namespace": "serving", "model": "qwen"}


def test_decisions_count_by_action_and_dry_run() -> None:
    m = OperatorMetrics()
    m.decision("serving", "llama", "scale-up", dry_run=False)
    m.decision("serving", "llama", "scale-up", dry_run=False)
    m.decision("serving", "llama", "scale-up", dry_run=True)
    name = P + "autoscaling_decisions_total"
    assert m.value(name, **LLAMA, action="scale-up", dry_run="false") == 2
    assert m.value(name, **LLAMA, action="scale-up", dry_run="true") == 1
    assert m.value(name, **LLAMA, action="hold", dry_run="false") is None


def test_fleet_gauges_are_set_not_added() -> None:
    m = OperatorMetrics()
    m.fleet("serving", "llama", replicas=3, desired=4, ring=2)
    m.fleet("serving", "llama", replicas=4, desired=4, ring=4)
    assert [m.value(P + g, **LLAMA) for g in ("replicas", "desired_replicas", "ring_members")] == [4, 4, 4]


def test_unknown_signals_are_absent_rather_than_zero() -> None:
    m = OperatorMetrics()
    m.signals("serving", "llama", hit_rate=0.6, ttft_p50=0.4, held=2)
    assert (m.value(P + "hit_rate", **LLAMA), m.value(P + "ttft_p50_seconds", **LLAMA)) == (0.6, 0.4)
    assert (m.value(P + "held_requests", **LLAMA), m.value(P + "metrics_available", **LLAMA)) == (2, 1)
    m.signals("serving", "llama", hit_rate=None, ttft_p50=0.5)
    assert (m.value(P + "hit_rate", **LLAMA), m.value(P + "ttft_p50_seconds", **LLAMA)) == (None, 0.5)
    assert m.value(P + "held_requests", **LLAMA) == 0
    m.signals("serving", "qwen", hit_rate=None, ttft_p50=None)  # never known: nothing to remove
    assert m.value(P + "hit_rate", **QWEN) is None
    assert m.value(P + "metrics_available", **QWEN) == 1


def test_unavailable_signals_count_by_reason_and_mark_the_metrics_unavailable() -> None:
    m = OperatorMetrics()
    m.signals("serving", "llama", hit_rate=0.5, ttft_p50=0.3)
    m.signals_unavailable("serving", "llama", "PrometheusUnreachable")
    m.signals_unavailable("serving", "llama", "PrometheusUnreachable")
    assert m.value(P + "metrics_available", **LLAMA) == 0
    name = P + "autoscaling_metrics_errors_total"
    assert m.value(name, **LLAMA, reason="PrometheusUnreachable") == 2


def test_forget_removes_every_series_of_one_model_and_only_of_it() -> None:
    m = OperatorMetrics()
    for model in ("llama", "qwen"):
        m.decision("serving", model, "hold", dry_run=False)
        m.fleet("serving", model, replicas=2, desired=2, ring=2)
        m.signals("serving", model, hit_rate=0.5, ttft_p50=0.2, held=1)
        m.signals_unavailable("serving", model, "NoData")
        m.reconcile_error("serving", model, "InvalidSpec")
    m.forget("serving", "llama")
    samples = [s for metric in m.registry.collect() for s in metric.samples]
    assert samples
    assert not [s for s in samples if s.labels.get("model") == "llama"]
    assert {s.name.removeprefix(P) for s in samples if s.labels.get("model") == "qwen"} >= {
        "autoscaling_decisions_total",
        "replicas",
        "desired_replicas",
        "ring_members",
        "hit_rate",
        "ttft_p50_seconds",
        "held_requests",
        "metrics_available",
        "autoscaling_metrics_errors_total",
        "reconcile_errors_total",
    }
    m.forget("serving", "llama")  # twice, or a model that never had a series: nothing to do
    m.forget("other", "never")


def test_a_forgotten_gauge_removed_earlier_is_no_error() -> None:
    m = OperatorMetrics()
    m.signals("serving", "llama", hit_rate=0.5, ttft_p50=0.2)
    m.signals("serving", "llama", hit_rate=None, ttft_p50=None)  # removed here...
    m.forget("serving", "llama")  # ...and still remembered: forget must skip it
    assert m.value(P + "hit_rate", **LLAMA) is None
    assert m.value(P + "metrics_available", **LLAMA) is None


def test_each_operator_has_its_own_registry() -> None:
    a, b = OperatorMetrics(), OperatorMetrics()
    a.fleet("serving", "llama", replicas=1, desired=1, ring=1)
    assert b.value(P + "replicas", **LLAMA) is None


def test_the_page_is_rendered_again_only_when_it_is_old() -> None:
    metrics, now = OperatorMetrics(), [0.0]
    page = RenderedPage(metrics.registry, max_age=10, clock=lambda: now[0])
    metrics.fleet("ns", "a", replicas=4, desired=4, ring=4)
    first = page()
    metrics.fleet("ns", "a", replicas=5, desired=5, ring=5)
    now[0] = 9.0
    assert page() is first  # a scrape within max_age: the page as rendered
    now[0] = 10.0
    assert b'prefixroute_operator_replicas{model="a",model_namespace="ns"} 5.0' in page()


def test_served_on_metrics_and_nothing_else() -> None:
    metrics = OperatorMetrics()
    metrics.reconciled(0.2)
    server = serve(metrics.registry, 0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            assert b"prefixroute_operator_reconcile_seconds_count 1.0" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "/other", timeout=5)
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
