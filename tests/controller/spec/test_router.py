"""spec.router: the router Deployment, its Service and the front knobs it carries."""

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.router import RouterSpec, parse_router


def test_router_defaults_and_errors() -> None:
    assert parse_router({}) == RouterSpec()
    with pytest.raises(SpecError, match="nodePort needs"):
        parse_router({"nodePort": 30001})
    with pytest.raises(SpecError, match="serviceType"):
        parse_router({"serviceType": "ExternalName"})


@pytest.mark.parametrize("service_type", ["NodePort", "LoadBalancer"])
def test_a_node_port_comes_with_a_service_type_that_has_one(service_type: str) -> None:
    router = parse_router({"serviceType": service_type, "nodePort": 30001})
    assert (router.service_type, router.node_port) == (service_type, 30001)


def test_fields_and_front_knobs_are_read() -> None:
    router = parse_router(
        {
            "replicas": 3,
            "port": 8080,
            "serviceAnnotations": {"a": "b"},
            "args": ["--log-level", "DEBUG"],
            "retries": 4,
            "holdSeconds": 30,
        }
    )
    assert (router.replicas, router.port, router.service_annotations, router.args) == (
        3,
        8080,
        {"a": "b"},
        ("--log-level", "DEBUG"),
    )
    assert (router.retries, router.hold_seconds, router.max_held_requests) == (4, 30.0, None)


def test_fair_sharing_and_tracing_are_read_from_their_own_objects() -> None:
    router = parse_router(
        {
            "fairSharing": {"maxInFlightPerEngine": 8, "maxWaiting": 100, "maxWaitSeconds": 2.5, "reservePerTenant": 1},
            "tracing": {"otlpEndpoint": "http://otel:4318", "sampleRatio": 0.1},
        }
    )
    assert (router.max_in_flight_per_member, router.max_waiting, router.max_wait_seconds) == (8, 100, 2.5)
    assert (router.reserve_per_tenant, router.otlp_endpoint, router.trace_sample_ratio) == (1, "http://otel:4318", 0.1)
    flat = parse_router({"maxInFlightPerEngine": 8, "otlpEndpoint": "http://otel:4318"})
    assert (flat.max_in_flight_per_member, flat.otlp_endpoint) == (None, None)  # not at spec.router's top level


@pytest.mark.parametrize(
    ("router", "message"),
    [
        ({"tracing": {"sampleRatio": 0.5}}, "spec.router.tracing.sampleRatio needs spec.router.tracing.otlpEndpoint"),
        ({"fairSharing": {"maxWaitSeconds": "long"}}, "^spec.router.fairSharing.maxWaitSeconds must be a number"),
        ({"fairSharing": []}, "^spec.router.fairSharing must be an object"),
        ({"replicas": 1.5}, "^spec.router.replicas must be an integer"),
        ({"serviceAnnotations": {"a": 1}}, "^spec.router.serviceAnnotations must map names to strings"),
    ],
)
def test_router_errors_name_the_field(router, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_router(router)
