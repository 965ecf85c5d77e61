"""spec.gateway's children: the InferencePool over the engine pods, and the Endpoint Picker
(`prefixroute epp`) it names — Deployment, Service, PodDisruptionBudget (pure).

The picker follows this resource's status.ring (ready engine pods, weights, drains) as the
router does, with the same routing flags — in precise mode the router's precise flags and its
model folder mount too, so the picker follows the engines' KV events — so both fronts route
alike; the InferencePool
tells a conformant gateway which pods and port to send to and where its picker is. The front
door is the router's too: spec.router.fairSharing and spec.auth (the API-key Secret, mounted
the same way) apply to every front of the model, so a gateway is no way around them.
"""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import (
    object_meta,
    selector_labels,
)
from prefixroute.controller.builders.pod import restricted_security_context
from prefixroute.controller.builders.router import (
    NO_AUTH,
    auth_flags,
    front_deployment,
    front_env,
    front_pod_template,
    front_routing_flags,
    front_volumes,
    knob_args,
    peer_flags,
    peer_port,
)
from prefixroute.controller.engines.base import POD_IP_ARG
from prefixroute.controller.names import (
    COMPONENT_ENGINE,
    COMPONENT_EPP,
    EPP_HEALTH_PORT,
    EPP_HEALTH_PORT_NAME,
    EPP_METRICS_PORT,
    EPP_METRICS_PORT_NAME,
    EPP_PORT,
    EPP_PORT_NAME,
    IMAGE,
    epp_name,
    pool_name,
)
from prefixroute.controller.precise import PreciseRouting
from prefixroute.controller.spec.adapters import LoraSlots
from prefixroute.controller.spec.auth import AuthSpec
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.gateway import GatewaySpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import RouterSpec
from prefixroute.controller.spec.routing import RoutingSpec
from prefixroute.crd import POOL_API_VERSION, POOL_KIND
from prefixroute.routing.knobs import SPEC_KNOBS

# The spec.router knobs that are the front door's, not the router's own: the picker takes them too.
FRONT_DOOR_SECTIONS = ("router.fairSharing", "router.priorities")
NO_ROUTER = RouterSpec()

DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}
LIVENESS_SERVICE = "liveness"  # the EPP's gRPC health service that is SERVING while the process lives


def inference_pool(ref: ModelRef, engine: EngineSpec, gateway: GatewaySpec) -> dict[str, Any]:
    """The engine pods as a GIE InferencePool whose picker is ours."""
    return {
        "apiVersion": POOL_API_VERSION,
        "kind": POOL_KIND,
        "metadata": object_meta(ref, pool_name(ref.name), COMPONENT_ENGINE),
        "spec": {
            "selector": {"matchLabels": selector_labels(ref, COMPONENT_ENGINE)},
            "targetPorts": [{"number": engine.port}],
            "endpointPickerRef": {
                "name": epp_name(ref.name),
                "port": {"number": EPP_PORT},
                "failureMode": gateway.failure_mode,
            },
        },
    }


def front_door_flags(router: RouterSpec) -> list[str]:
    """spec.router.fairSharing's and .priorities' flags, which `prefixroute epp` takes as the router does."""
    flags = []
    for knob in SPEC_KNOBS:
        if knob.crd_section in FRONT_DOOR_SECTIONS:
            flags += knob_args(knob, getattr(router, knob.name))
    return flags


def epp_args(
    ref: ModelRef,
    routing: RoutingSpec,
    gateway: GatewaySpec,
    router: RouterSpec = NO_ROUTER,
    auth: AuthSpec = NO_AUTH,
    precise: PreciseRouting | None = None,
    lora: LoraSlots | None = None,
) -> list[str]:
    """spec.routing's knobs (and in precise mode the router's precise flags: the picker
    follows the engines' KV events as the router does), the replicas' peers (the picker's own
    Service), the front door's (fair sharing, API keys), then spec.gateway.args."""
    return [
        "epp",
        "--host",
        POD_IP_ARG,
        "--port",
        str(EPP_PORT),
        "--health-port",
        str(EPP_HEALTH_PORT),
        "--metrics-port",
        str(EPP_METRICS_PORT),
        "--resource",
        f"$(POD_NAMESPACE)/{ref.name}",
        "--inference-objectives",
        f"$(POD_NAMESPACE)/{pool_name(ref.name)}",
        *front_routing_flags(routing, precise, lora),
        *peer_flags(epp_name(ref.name)),
        *front_door_flags(router),
        *auth_flags(auth),
        *gateway.args,
    ]


def _grpc_probe(service: str, **timing: int) -> dict[str, Any]:
    return {"grpc": {"port": EPP_HEALTH_PORT, "service": service}, **timing}


def epp_pod_template(
    ref: ModelRef,
    routing: RoutingSpec,
    gateway: GatewaySpec,
    router: RouterSpec = NO_ROUTER,
    auth: AuthSpec = NO_AUTH,
    precise: PreciseRouting | None = None,
    lora: LoraSlots | None = None,
) -> tuple[dict[str, Any], str]:
    mounts, volumes = front_volumes(auth, precise)  # as the router's
    container: dict[str, Any] = {
        "name": "epp",
        "image": gateway.image or IMAGE,
        "args": epp_args(ref, routing, gateway, router, auth, precise, lora),
        "ports": [
            {"name": EPP_PORT_NAME, "containerPort": EPP_PORT, "protocol": "TCP"},
            {"name": EPP_HEALTH_PORT_NAME, "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": EPP_METRICS_PORT_NAME, "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
            peer_port(),
        ],
        "env": front_env(precise),  # as the router's
        "resources": dict(gateway.resources) if gateway.resources else DEFAULT_RESOURCES,
        # Ready while a member is routable (the gateway then gets answers, not 503s).
        "readinessProbe": _grpc_probe("", periodSeconds=5, timeoutSeconds=2, failureThreshold=3),
        "livenessProbe": _grpc_probe(LIVENESS_SERVICE, periodSeconds=10, timeoutSeconds=2, failureThreshold=3),
        "securityContext": restricted_security_context(),
        "volumeMounts": mounts,
    }
    return front_pod_template(
        ref, COMPONENT_EPP, container, volumes, gateway.image_pull_policy, EPP_METRICS_PORT, epp_name(ref.name)
    )


def epp_deployment(ref: ModelRef, template: dict[str, Any], replicas: int) -> dict[str, Any]:
    return front_deployment(ref, COMPONENT_EPP, epp_name(ref.name), template, replicas)


def epp_service(ref: ModelRef) -> dict[str, Any]:
    """What the InferencePool's endpointPickerRef names; gRPC is HTTP/2 in the clear (h2c)."""

    def port(name: str, number: int, protocol: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "port": number, "targetPort": name, "protocol": "TCP"}
        if protocol:
            out["appProtocol"] = protocol
        return out

    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, epp_name(ref.name), COMPONENT_EPP),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ref, COMPONENT_EPP),
            "ports": [
                port(EPP_PORT_NAME, EPP_PORT, "kubernetes.io/h2c"),
                port(EPP_HEALTH_PORT_NAME, EPP_HEALTH_PORT, "kubernetes.io/h2c"),
                port(EPP_METRICS_PORT_NAME, EPP_METRICS_PORT, "http"),
            ],
        },
    }


def epp_pdb(ref: ModelRef) -> dict[str, Any]:
    """A drain takes one picker at a time: under FailClose a gateway with no picker answers errors."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(ref, epp_name(ref.name), COMPONENT_EPP),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(ref, COMPONENT_EPP)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def epp_endpoint(ref: ModelRef) -> str:
    """The picker's in-cluster address, published in status.gateway."""
    return f"{epp_name(ref.name)}.{ref.namespace}.svc:{EPP_PORT}"
