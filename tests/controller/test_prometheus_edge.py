"""The operator's Prometheus client: against a port where nothing listens, and against an
https server whose certificate a CA made in the test signed."""

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from urllib3.exceptions import InsecureRequestWarning

from prefixroute.autoscaling.prometheus_signals import TLS_FAILED, MetricsUnavailable
from prefixroute.controller.prometheus_edge import prometheus_query
from tests.controller.certificates import (
    SAMPLE,
    Authority,
    ServerCertificate,
    https_prometheus,
    make_authority,
    make_server_certificate,
)


def test_unreachable_prometheus_is_metrics_unavailable():
    query = prometheus_query("http://127.0.0.1:9", timeout_seconds=1)
    with pytest.raises(MetricsUnavailable, match=r"127\.0\.0\.1:9") as caught:
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
    assert not messages
    assert " at 0x" not in message
    assert "/api/v1/query" not in message
    assert message == "Prometheus at http://127.0.0.1:9 failed: ConnectionError: [Errno 111] Connection refused"


# --- https: the certificate is checked unless the spec says otherwise ---------------------------


@dataclass(frozen=True)
class Pki:
    ours: Authority  # signed the server's certificate
    other: Authority  # a CA that did not
    server: ServerCertificate


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ours = make_authority(folder, "prometheus-ca")
    return Pki(ours, make_authority(folder, "other-ca"), make_server_certificate(folder, ours))


@pytest.fixture
def https_url(pki: Pki) -> Iterator[str]:
    with https_prometheus(pki.server) as url:
        yield url


def test_https_is_verified_by_default_and_an_unknown_ca_is_refused(https_url: str, pki: Pki) -> None:
    for query in (prometheus_query(https_url, timeout_seconds=2), prometheus_query(https_url, 2, str(pki.other.cert))):
        with pytest.raises(MetricsUnavailable) as caught:
            query("up")
        assert caught.value.reason == TLS_FAILED
        assert str(caught.value) == (
            f"Prometheus at {https_url} failed TLS: SSLError: certificate verify failed: unable to get local "
            "issuer certificate (spec.autoscaling.prometheusTLS.ca names the CA to trust)"
        )  # stable: no address, no query, no source line


def test_https_with_the_ca_that_signed_it_is_read(https_url: str, pki: Pki) -> None:
    assert prometheus_query(https_url, 2, str(pki.ours.cert))("up") == [SAMPLE]


def test_https_without_verification_is_read_and_leaves_the_log_alone(https_url: str) -> None:
    """urllib3 would warn at every request; the operator's own Warning Event replaces that."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        query = prometheus_query(https_url, 2, False)
        assert query("up") == [SAMPLE]
        assert query("up") == [SAMPLE]
    assert [w for w in caught if issubclass(w.category, InsecureRequestWarning)] == []


def test_a_plain_http_server_behind_an_https_url_is_a_tls_failure(pki: Pki) -> None:
    import http.server
    import threading

    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(MetricsUnavailable) as caught:
            prometheus_query(f"https://127.0.0.1:{httpd.server_address[1]}", 2, str(pki.ours.cert))("up")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert caught.value.reason == TLS_FAILED
    assert "wrong version number" in str(caught.value)
