"""The operator's /metrics: a page rendered at most once every PAGE_MAX_AGE seconds."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from prefixroute.controller.metrics import OperatorMetrics, RenderedPage, serve


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
