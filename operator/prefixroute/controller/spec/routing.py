"""spec.routing: the router's strategy and its knobs, as the routing core's RoutingConfig.

Which fields there are, their defaults and bounds come from the knob declarations
(routing/knobs.py), as do the CRD's schema for them and the router's flags, so the
router, the simulator and the operator can never disagree about them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.controller.spec.knobs import read_knobs
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.knobs import FRONT_KNOBS, ROUTING_KNOBS, TENANT_HEADER


@dataclass(frozen=True)
class RoutingSpec:
    config: RoutingConfig
    # the front's knobs under spec.routing, one field each (named as the knob)
    tenant_header: str | None = TENANT_HEADER.default
    mode: str | None = None  # unset: precise where the engine allows it (controller/precise.py)


def parse_routing(data: Any, tenant_from_keys: bool = False) -> RoutingSpec:
    """`tenant_from_keys`: spec.auth names API keys, whose tenants isolation can salt with."""
    f = Fields(data, "spec.routing")
    config = RoutingConfig(**read_knobs(f, ROUTING_KNOBS))
    front = read_knobs(f, FRONT_KNOBS)
    # Relates fields, like the CRD's hand-written CEL rule of the same message.
    if config.isolate_tenants and front["tenant_header"] is None and not tenant_from_keys:
        raise SpecError(
            "spec.routing.isolateTenants needs spec.routing.tenantHeader or spec.auth.apiKeysSecret: "
            "something must name the tenant"
        )
    return RoutingSpec(config=config, **front)
