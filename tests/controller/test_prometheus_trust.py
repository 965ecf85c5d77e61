"""A model's Prometheus CA bundle: read through the edge, kept a minute, checked as OpenSSL
loads it, written without anything but certificates; every fault a reason of its own, and
a CA bundle read this way is what makes the real https client accept the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixroute.autoscaling.prometheus_signals import CA_INVALID, CA_UNAVAILABLE, MetricsUnavailable
from prefixroute.autoscaling.settings import CAReference, PrometheusTLS
from prefixroute.controller.errors import ApplyFailed
from prefixroute.controller.prometheus_edge import prometheus_query
from prefixroute.controller.prometheus_trust import CACHE_SECONDS, PrometheusTrust
from tests.controller.certificates import (
    SAMPLE,
    Authority,
    https_prometheus,
    make_authority,
    make_server_certificate,
)
from tests.controller.helpers import FakeEdge

NS = "serving"
FROM_SECRET = PrometheusTLS(ca=CAReference("Secret", "prom-ca"))
FROM_CONFIG_MAP = PrometheusTLS(ca=CAReference("ConfigMap", "prom-bundle", "bundle.pem"))
PRIVATE = b"-----BEGIN PRIVATE KEY-----\nTUFZIE5PVCBMRUFWRSBUSEUgT1BFUkFUT1I=\n-----END PRIVATE KEY-----\n"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("pki"), "prometheus-ca")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _trust(edge: FakeEdge, tmp_path: Path, clock: Clock | None = None) -> PrometheusTrust:
    return PrometheusTrust(read=edge.read_data, folder=tmp_path, clock=clock or Clock())


def _fault(trust: PrometheusTrust, tls: PrometheusTLS = FROM_SECRET) -> MetricsUnavailable:
    with pytest.raises(MetricsUnavailable) as caught:
        trust(NS, tls)
    return caught.value


def test_without_a_ca_the_public_cas_and_insecure_only_when_asked(tmp_path: Path) -> None:
    edge = FakeEdge()
    trust = _trust(edge, tmp_path)
    assert trust(NS, None) is True
    assert trust(NS, PrometheusTLS()) is True
    assert trust(NS, PrometheusTLS(insecure_skip_verify=True)) is False
    assert edge.data_reads == []


def test_a_secrets_bundle_is_written_with_its_certificates_only(tmp_path: Path, ca: Authority) -> None:
    """A kubernetes.io/tls Secret holds a private key too: it never reaches the disk."""
    edge = FakeEdge()
    edge.data[("Secret", NS, "prom-ca")] = {"ca.crt": PRIVATE + b"comment\n" + ca.pem, "tls.key": PRIVATE}
    path = _trust(edge, tmp_path)(NS, FROM_SECRET)
    assert isinstance(path, str)
    assert Path(path).parent == tmp_path
    assert Path(path).read_bytes().strip() == ca.pem.strip()
    assert [p.read_bytes() for p in tmp_path.iterdir()] == [Path(path).read_bytes()]


def test_a_config_maps_key_is_read_once_a_minute_and_a_rotation_is_followed(tmp_path: Path, ca: Authority) -> None:
    edge, clock = FakeEdge(), Clock()
    other = make_authority(tmp_path, "rotated-ca")
    folder = tmp_path / "bundles"
    folder.mkdir()
    edge.data[("ConfigMap", NS, "prom-bundle")] = {"bundle.pem": ca.pem}
    trust = _trust(edge, folder, clock)
    first = trust(NS, FROM_CONFIG_MAP)
    clock.now += CACHE_SECONDS - 1
    assert trust(NS, FROM_CONFIG_MAP) == first
    assert len(edge.data_reads) == 1
    edge.data[("ConfigMap", NS, "prom-bundle")] = {"bundle.pem": ca.pem + other.pem}  # a CA rotation adds the new one
    clock.now += 1
    second = trust(NS, FROM_CONFIG_MAP)
    assert second != first
    assert len(edge.data_reads) == 2
    assert Path(second).read_bytes() == ca.pem + other.pem


def test_each_namespace_reads_its_own_object(tmp_path: Path, ca: Authority) -> None:
    edge = FakeEdge()
    edge.data[("Secret", NS, "prom-ca")] = {"ca.crt": ca.pem}
    trust = _trust(edge, tmp_path)
    assert isinstance(trust(NS, FROM_SECRET), str)
    with pytest.raises(MetricsUnavailable) as caught:
        trust("team-b", FROM_SECRET)  # a model elsewhere naming the same Secret name
    assert caught.value.reason == CA_UNAVAILABLE
    assert "Secret team-b/prom-ca" in str(caught.value)


@pytest.mark.parametrize(
    ("data", "reason", "message"),
    [
        (
            None,
            CA_UNAVAILABLE,
            "the Prometheus CA's Secret serving/prom-ca (spec.autoscaling.prometheusTLS.ca) does not exist",
        ),
        (
            {"tls.crt": b"x", "tls.key": PRIVATE},
            CA_UNAVAILABLE,
            "the Prometheus CA's Secret serving/prom-ca has no key ca.crt (its keys: tls.crt, tls.key)",
        ),
        (
            {"ca.crt": PRIVATE},
            CA_INVALID,
            "the Prometheus CA's key ca.crt of Secret serving/prom-ca holds no PEM certificate "
            "(-----BEGIN CERTIFICATE-----)",
        ),
        (
            {"ca.crt": b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"},
            CA_INVALID,
            "the Prometheus CA's key ca.crt of Secret serving/prom-ca: certificate 1 of 1 does not load (not enough data",
        ),
    ],
)
def test_a_missing_or_unusable_bundle_is_a_reason_to_hold(
    tmp_path: Path, data: dict[str, bytes] | None, reason: str, message: str
) -> None:
    edge = FakeEdge()
    if data is not None:
        edge.data[("Secret", NS, "prom-ca")] = data
    fault = _fault(_trust(edge, tmp_path))
    assert fault.reason == reason
    assert str(fault).startswith(message)
    assert PRIVATE.decode().splitlines()[1] not in str(fault)  # names keys, never what they hold
    assert list(tmp_path.iterdir()) == []


def test_a_refused_read_says_what_the_api_server_said(tmp_path: Path) -> None:
    edge = FakeEdge()
    edge.fail["Secret"] = ApplyFailed(
        'Secret serving/prom-ca: secrets "prom-ca" is forbidden: User "system:serviceaccount:prefixroute-system:'
        'prefixroute-operator" cannot get resource "secrets"',
        status=403,
    )
    fault = _fault(_trust(edge, tmp_path))
    assert fault.reason == CA_UNAVAILABLE
    assert "cannot get resource" in str(fault)


def test_a_failure_is_not_kept_so_the_next_tick_finds_a_fixed_bundle(tmp_path: Path, ca: Authority) -> None:
    edge = FakeEdge()
    trust = _trust(edge, tmp_path)
    assert _fault(trust).reason == CA_UNAVAILABLE
    edge.data[("Secret", NS, "prom-ca")] = {"ca.crt": ca.pem}
    assert isinstance(trust(NS, FROM_SECRET), str)


def test_the_bundle_read_this_way_is_what_the_client_trusts(tmp_path: Path, ca: Authority) -> None:
    """End to end at the edge: a server signed by the CA in a ConfigMap is read; the same
    server under a CA the ConfigMap does not hold is refused."""
    edge = FakeEdge()
    stranger = make_authority(tmp_path, "stranger-ca")
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    trust = _trust(edge, bundles)
    with https_prometheus(make_server_certificate(tmp_path, ca)) as url:
        edge.data[("ConfigMap", NS, "prom-bundle")] = {"bundle.pem": ca.pem}
        assert prometheus_query(url, 2, trust(NS, FROM_CONFIG_MAP))("up") == [SAMPLE]
        edge.data[("ConfigMap", "team-b", "prom-bundle")] = {"bundle.pem": stranger.pem}
        with pytest.raises(MetricsUnavailable, match="certificate verify failed"):
            prometheus_query(url, 2, trust("team-b", FROM_CONFIG_MAP))("up")
