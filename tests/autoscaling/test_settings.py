"""The autoscaler's settings: spec.autoscaling with its defaults, and what it refuses."""

import dataclasses

import pytest

from prefixroute.autoscaling.settings import AutoscalingSettings


def test_settings_from_the_crd_spec():
    s = AutoscalingSettings.from_spec(
        {"enabled": True, "minReplicas": 2, "maxReplicas": 6, "targetQueueDepth": 3, "dryRun": True, "unknownKey": 1}
    )
    assert (s.enabled, s.min_replicas, s.max_replicas, s.target_queue_depth, s.dry_run) == (True, 2, 6, 3, True)
    with pytest.raises(ValueError):
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
        "prometheus": "http://prom:9090",
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
    assert list(dataclasses.asdict(settings).values()) == list(values.values())


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
