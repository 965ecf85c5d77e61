"""spec.routing: the router's strategy and its knobs, as the routing core's RoutingConfig.

Defaults come from ``RoutingConfig`` itself, so the router, the simulator and the
operator can never disagree about them (tests pin the CRD's defaults to the same values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.routing.config import RoutingConfig

DEFAULTS = RoutingConfig()


@dataclass(frozen=True)
class RoutingSpec:
    config: RoutingConfig
    tenant_header: str | None = None


def parse_routing(data: Any) -> RoutingSpec:
    f = Fields(data, "spec.routing")
    tenant_header = f.text_or_none("tenantHeader")
    isolate = f.flag("isolateTenants", DEFAULTS.isolate_tenants)
    if isolate and tenant_header is None:
        raise SpecError("spec.routing.isolateTenants needs spec.routing.tenantHeader, the header that names the tenant")
    try:
        config = RoutingConfig(
            strategy=f.text("strategy", DEFAULTS.strategy),
            block_size=f.integer("blockSize", DEFAULTS.block_size),
            prefix_blocks=f.integer("prefixBlocks", DEFAULTS.prefix_blocks),
            load_factor=f.number("loadFactor", DEFAULTS.load_factor),
            load_slack=f.integer("loadSlack", DEFAULTS.load_slack),
            queue_penalty=f.number("queuePenalty", DEFAULTS.queue_penalty),
            virtual_nodes=f.integer("virtualNodes", DEFAULTS.virtual_nodes),
            isolate_tenants=isolate,
        )
    except ValueError as exc:
        raise SpecError(f"spec.routing: {exc}") from exc
    return RoutingSpec(config=config, tenant_header=tenant_header)
