import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.routing import parse_routing
from prefixroute.routing.config import RoutingConfig


def test_empty_routing_is_the_routing_cores_default() -> None:
    assert parse_routing({}).config == RoutingConfig()


def test_fields_map_to_the_routing_config() -> None:
    spec = parse_routing(
        {
            "strategy": "least-load",
            "blockSize": 64,
            "prefixBlocks": 2,
            "loadFactor": 1.5,
            "virtualNodes": 32,
            "tenantHeader": "X-Team",
            "isolateTenants": True,
        }
    )
    assert spec.config == RoutingConfig(
        strategy="least-load", block_size=64, prefix_blocks=2, load_factor=1.5, virtual_nodes=32, isolate_tenants=True
    )
    assert spec.tenant_header == "X-Team"


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"strategy": "random"}, "unknown strategy"),
        ({"loadFactor": 0.9}, "load factor"),
        ({"isolateTenants": True}, "tenantHeader"),
        ({"blockSize": 1.5}, "must be an integer"),
    ],
)
def test_invalid_routing_is_a_spec_error(routing, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_routing(routing)
