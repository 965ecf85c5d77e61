"""spec.autoscaling.prometheusTLS as the autoscaler reads it: a CA from a Secret or a ConfigMap,
or no verification when asked, and a readable refusal of what the CRD would refuse too."""

from __future__ import annotations

import pytest

from prefixroute.autoscaling.settings import AutoscalingSettings, CAReference, PrometheusTLS

HTTPS = "https://prometheus.monitoring:9090"


def _settings(tls: object, url: str | None = HTTPS) -> AutoscalingSettings:
    return AutoscalingSettings.from_spec({"enabled": True, "prometheus": url, "prometheusTLS": tls})


def test_without_prometheus_tls_nothing_is_skipped() -> None:
    settings = AutoscalingSettings.from_spec({"enabled": True, "prometheus": HTTPS})
    assert settings.prometheus_tls is None and not settings.skips_verification


@pytest.mark.parametrize(
    ("tls", "expected"),
    [
        ({"ca": {"secretKeyRef": {"name": "prom-ca"}}}, PrometheusTLS(ca=CAReference("Secret", "prom-ca", "ca.crt"))),
        (
            {"ca": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "ca.crt"}}, "insecureSkipVerify": False},
            PrometheusTLS(ca=CAReference("ConfigMap", "kube-root-ca.crt", "ca.crt")),
        ),
        ({"insecureSkipVerify": True}, PrometheusTLS(insecure_skip_verify=True)),
        ({}, PrometheusTLS()),
    ],
)
def test_prometheus_tls_is_read(tls: dict, expected: PrometheusTLS) -> None:
    settings = _settings(tls)
    assert settings.prometheus_tls == expected
    assert settings.skips_verification is expected.insecure_skip_verify


@pytest.mark.parametrize(
    ("tls", "url", "message"),
    [
        (
            {"ca": {"secretKeyRef": {"name": "prom-ca"}}, "insecureSkipVerify": True},
            HTTPS,
            "set ca or insecureSkipVerify, not both",
        ),
        ({"insecureSkipVerify": True}, "http://prometheus:9090", "needs prometheus to be an https:// URL"),
        ({"insecureSkipVerify": True}, None, "needs prometheus to be an https:// URL"),
        ({"ca": {}}, HTTPS, "exactly one of secretKeyRef or configMapKeyRef"),
        (
            {"ca": {"secretKeyRef": {"name": "a"}, "configMapKeyRef": {"name": "b"}}},
            HTTPS,
            "exactly one of secretKeyRef or configMapKeyRef",
        ),
        ({"ca": {"secretKeyRef": {"name": "Prom_CA"}}}, HTTPS, "secretKeyRef.name must name a Secret"),
        ({"ca": {"configMapKeyRef": {"name": "b", "key": "a/b"}}}, HTTPS, "configMapKeyRef.key must be a key"),
        ({"ca": {"secretKeyRef": "prom-ca"}}, HTTPS, "must be an object with name and key"),
        ({"insecureSkipVerify": "yes"}, HTTPS, "must be true or false"),
        ("verify", HTTPS, "prometheusTLS must be an object"),
    ],
)
def test_a_prometheus_tls_the_crd_refuses_is_refused_here_too(tls: object, url: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _settings(tls, url)
