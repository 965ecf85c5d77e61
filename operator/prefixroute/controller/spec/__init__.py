"""Typed views of a PrefixRoutedModel's spec (pure).

The API server has already applied the CRD's defaults and rejected malformed objects;
these parsers still fall back to the same defaults (and tests pin them equal to the CRD's),
so an object stored before a schema change, or read from a file, behaves the same.
They raise ``SpecError`` for what the schema cannot express.
"""

from prefixroute.controller.spec.engine import EngineSpec, parse_engine
from prefixroute.controller.spec.gateway import GatewaySpec, parse_gateway
from prefixroute.controller.spec.model import ModelRef, ModelSpec, engine_replicas, model_ref, parse_spec
from prefixroute.controller.spec.router import RouterSpec, parse_router
from prefixroute.controller.spec.routing import RoutingSpec, parse_routing

__all__ = [
    "EngineSpec",
    "GatewaySpec",
    "ModelRef",
    "ModelSpec",
    "RouterSpec",
    "RoutingSpec",
    "engine_replicas",
    "model_ref",
    "parse_engine",
    "parse_gateway",
    "parse_router",
    "parse_routing",
    "parse_spec",
]
