"""Services: a headless one over the engines, and the router's, which clients call."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import object_meta, selector_labels
from prefixroute.controller.names import (
    COMPONENT_ENGINE,
    COMPONENT_ROUTER,
    ENGINE_PORT_NAME,
    ROUTER_PORT_NAME,
    engine_name,
    router_name,
)
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import RouterSpec


def engine_service(ref: ModelRef, engine: EngineSpec) -> dict[str, Any]:
    """Headless: no virtual IP to load-balance behind the router's back; gives each engine
    pod a DNS name and Prometheus service discovery a target list."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, engine_name(ref.name), COMPONENT_ENGINE),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(ref, COMPONENT_ENGINE),
            "ports": [
                {"name": ENGINE_PORT_NAME, "port": engine.port, "targetPort": ENGINE_PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def router_service(ref: ModelRef, router: RouterSpec) -> dict[str, Any]:
    port: dict[str, Any] = {
        "name": ROUTER_PORT_NAME,
        "port": router.port,
        "targetPort": ROUTER_PORT_NAME,
        "protocol": "TCP",
    }
    if router.node_port is not None:
        port["nodePort"] = router.node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, router_name(ref.name), COMPONENT_ROUTER, router.service_annotations),
        "spec": {"type": router.service_type, "selector": selector_labels(ref, COMPONENT_ROUTER), "ports": [port]},
    }


def router_endpoint(ref: ModelRef, router: RouterSpec) -> str:
    """The in-cluster URL of the router Service, published in status.routerEndpoint."""
    return f"http://{router_name(ref.name)}.{ref.namespace}.svc:{router.port}"
