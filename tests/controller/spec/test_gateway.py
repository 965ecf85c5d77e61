import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.gateway import parse_gateway


def test_defaults_keep_only_the_router() -> None:
    gateway = parse_gateway(None)
    assert not gateway.enabled
    assert gateway.router
    assert gateway.router_live
    assert gateway.failure_mode == "FailClose"
    assert gateway.replicas == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"router": False}, "one front must serve"),
        ({"enabled": True, "failureMode": "Sometimes"}, "failureMode must be one of FailClose, FailOpen"),
        ({"enabled": True, "replicas": 0}, "replicas must be at least 1"),
        ({"enabled": "yes"}, "spec.gateway.enabled must be true or false"),
    ],
)
def test_what_cannot_be_honoured_is_a_spec_error(data: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_gateway(data)


def test_gateway_only() -> None:
    gateway = parse_gateway({"enabled": True, "router": False, "failureMode": "FailOpen"})
    assert gateway.enabled
    assert not gateway.router_live
    assert gateway.failure_mode == "FailOpen"
