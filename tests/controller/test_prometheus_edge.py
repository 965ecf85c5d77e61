"""The operator's Prometheus client against a port where nothing listens."""

import pytest

from prefixroute.autoscaling.prometheus_signals import MetricsUnavailable
from prefixroute.controller.prometheus_edge import prometheus_query


def test_unreachable_prometheus_is_metrics_unavailable():
    query = prometheus_query("http://127.0.0.1:9", timeout_seconds=1)
    with pytest.raises(MetricsUnavailable, match="127.0.0.1:9") as caught:
        query("up")
    assert caught.value.reason == "PrometheusUnreachable"


def test_an_unreachable_message_is_the_same_every_time() -> None:
    """requests' messages name object addresses; the condition's message must not change per tick."""
    query = prometheus_query("http://127.0.0.1:9", timeout_seconds=1)
    messages = set()
    for _ in range(2):
        with pytest.raises(MetricsUnavailable) as caught:
            query("up")
        messages.add(str(caught.value))
    message = messages.pop()
    assert not messages and " at 0x" not in message and "/api/v1/query" not in message
    assert message == "Prometheus at http://127.0.0.1:9 failed: ConnectionError: [Errno 111] Connection refused"
