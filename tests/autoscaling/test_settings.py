"""The autoscaler's settings: spec.autoscaling with its defaults, and what it refuses; and
spec.autoscaling.prometheusTLS as the autoscaler reads it: a CA from a Secret or a ConfigMap,
or no verification when asked, and a readable refusal of what the CRD would refuse too."""

import dataclasses

import pytest

from prefixroute.autoscaling.settings import AutoscalingSettings, CAReference, PrometheusTLS


def test_settings_from_the_crd_spec():
    s = AutoscalingSettings.from_spec(
        {"enabled": True, "minReplicas": 2, "maxReplicas": 6, "targetQueueDepth": 3, "dryRun": True, "unknownKey": 1}
    )
    assert (s.enabled, s.min_replicas, s.max_replicas, s.target_queue_depth, s.dry_run) == (True, 2, 6, 3, True)
    with pytest.raises(ValueError, match=r"autoscaling needs 0 <= minReplicas <= maxReplicas"):
        AutoscalingSettings.from_spec({"minReplicas": 5, "maxReplicas": 2})


@pytest.mark.parametrize("spec", [None, {}])
def test_no_spec_is_the_defaults(spec):
    assert AutoscalingSettings.from_spec(spec) == AutoscalingSettings()


def test_every_field_is_read_from_its_camel_case_key():
    """The CRD's keys are the fields' names in camelCase, an acronym too (targetTtftP50Seconds)."""
    values = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 12,
        "prometheus": "https://prom:9090",
        "prometheusTLS": {"insecureSkipVerify": True},
        "targetQueueDepth": 2.5,
        "targetTtftP50Seconds": 0.8,
        "hitRateFloor": 0.3,
        "hotSpotFactor": 2.0,
        "scaleUpWindowSeconds": 30.0,
        "scaleDownWindowSeconds": 600.0,
        "scaleUpCooldownSeconds": 10.0,
        "scaleDownCooldownSeconds": 90.0,
        "maxScaleUpStep": 2,
        "spikeFactor": 4.0,
        "drainTimeoutSeconds": 45.0,
        "scaleToZeroIdleSeconds": 900.0,
        "minWeight": 0.5,
        "intervalSeconds": 5.0,
        "dryRun": True,
    }
    settings = AutoscalingSettings.from_spec(values)
    assert len(values) == len(dataclasses.fields(AutoscalingSettings))
    read = dataclasses.asdict(settings)
    read["prometheus_tls"] = {"insecureSkipVerify": settings.skips_verification}
    assert list(read.values()) == list(values.values())


def test_a_null_field_keeps_its_default():
    """A server-side apply can carry explicit nulls; they mean "unset", not None."""
    assert AutoscalingSettings.from_spec({"maxReplicas": None, "targetQueueDepth": None}) == AutoscalingSettings()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_replicas": -1}, "0 <= minReplicas <= maxReplicas and maxReplicas >= 1"),
        ({"min_replicas": 5, "max_replicas": 4}, "0 <= minReplicas <= maxReplicas"),
        ({"min_replicas": 0, "max_replicas": 0}, "maxReplicas >= 1"),
        ({"target_queue_depth": 0}, "autoscaling targets must be positive"),
        ({"target_ttft_p50_seconds": -1.0}, "autoscaling targets must be positive"),
        ({"hot_spot_factor": 1.0}, "hotSpotFactor and spikeFactor must be above 1"),
        ({"spike_factor": 0.5}, "hotSpotFactor and spikeFactor must be above 1"),
        ({"min_weight": 0.0}, r"minWeight must be in \(0, 1\]"),
        ({"min_weight": 1.5}, r"minWeight must be in \(0, 1\]"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_their_reason(fields, message):
    with pytest.raises(ValueError, match=message):
        AutoscalingSettings(**fields)


@pytest.mark.parametrize(
    "fields",
    [{"min_replicas": 0, "max_replicas": 1}, {"min_replicas": 3, "max_replicas": 3}, {"min_weight": 1.0}],
)
def test_the_edges_of_each_range_are_allowed(fields):
    assert AutoscalingSettings(**fields)


HTTPS = "https://prometheus.monitoring:9090"


def _settings(tls: object, url: str | None = HTTPS) -> AutoscalingSettings:
    return AutoscalingSettings.from_spec({"enabled": True, "prometheus": url, "prometheusTLS": tls})


def test_without_prometheus_tls_nothing_is_skipped() -> None:
    settings = AutoscalingSettings.from_spec({"enabled": True, "prometheus": HTTPS})
    assert settings.prometheus_tls is None
    assert not settings.skips_verification


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
