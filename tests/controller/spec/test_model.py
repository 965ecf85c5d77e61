import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.model import engine_replicas, model_ref, parse_spec
from tests.controller.helpers import model_body

SIM = {"kind": "sim", "model": "demo"}
AUTO = {"enabled": True, "prometheus": "http://prometheus:9090", "minReplicas": 2, "maxReplicas": 6}


def test_defaults_without_the_api_server_match_the_schema_defaults() -> None:
    """A body the API server defaulted and a bare one parse the same."""
    bare = parse_spec(model_body({"engine": SIM}, defaults=False)["spec"])
    stored = parse_spec(model_body({"engine": SIM})["spec"])
    assert bare == stored


def test_identity() -> None:
    ref = model_ref(model_body(name="m", namespace="ns", uid="u", generation=4))
    assert (ref.name, ref.namespace, ref.uid, ref.generation) == ("m", "ns", "u", 4)
    assert ref.object_reference()["metadata"] == {"name": "m", "namespace": "ns", "uid": "u"}


def test_replicas_come_from_the_spec_without_autoscaling() -> None:
    spec = parse_spec({"engine": SIM, "replicas": 3})
    assert engine_replicas(spec, {"autoscaling": {"desiredReplicas": 9}}) == 3


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, 3),  # spec.replicas is the starting point
        ({"autoscaling": {"desiredReplicas": 5}}, 5),
        ({"autoscaling": {"desiredReplicas": 50}}, 6),  # clamped to max
        ({"autoscaling": {"desiredReplicas": 0}}, 2),  # clamped to min
        ({"autoscaling": {"desiredReplicas": "7"}}, 3),  # junk is ignored
    ],
)
def test_with_autoscaling_the_operator_owns_the_count(status, expected) -> None:
    assert engine_replicas(parse_spec({"engine": SIM, "replicas": 3, "autoscaling": AUTO}), status) == expected


def test_in_dry_run_the_spec_keeps_the_count() -> None:
    spec = parse_spec({"engine": SIM, "replicas": 3, "autoscaling": {**AUTO, "dryRun": True}})
    assert engine_replicas(spec, {"autoscaling": {"desiredReplicas": 5, "recommendedReplicas": 5}}) == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"engine": SIM, "replicas": -1}, "must not be negative"),
        ({"engine": SIM, "autoscaling": {"minReplicas": 4, "maxReplicas": 2}}, "spec.autoscaling"),
        ({"engine": SIM, "replicas": "two"}, "must be an integer"),
        ({"engine": "sim"}, "spec.engine must be an object"),
        ({}, "spec.engine.kind is required"),
    ],
)
def test_what_the_operator_cannot_honour(spec, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_autoscaling_without_a_prometheus_url_is_accepted() -> None:
    # The operator's --prometheus-url may supply it; without either, the autoscaler holds
    # and says so in MetricsAvailable (tests/autoscale/test_prometheus.py).
    assert parse_spec({"engine": SIM, "autoscaling": {"enabled": True}}).autoscaling.prometheus is None
