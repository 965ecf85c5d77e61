"""spec.router: the router Deployment and the Service clients call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields, Obj
from prefixroute.controller.spec.knobs import read_knobs
from prefixroute.routing.knobs import FRONT_KNOBS

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
DEFAULT_ROUTER_REPLICAS = 2
DEFAULT_SERVICE_TYPE = "ClusterIP"
DEFAULT_SERVICE_PORT = 80


@dataclass(frozen=True)
class RouterSpec:
    replicas: int = DEFAULT_ROUTER_REPLICAS
    image: str | None = None
    image_pull_policy: str | None = None
    resources: Obj = field(default_factory=dict)
    service_type: str = DEFAULT_SERVICE_TYPE
    port: int = DEFAULT_SERVICE_PORT
    node_port: int | None = None
    service_annotations: Mapping[str, str] = field(default_factory=dict)
    retries: int | None = None  # a front knob (routing/knobs.py); None: the router's own default
    hold_seconds: float | None = None  # a front knob; None: 60 s when the model may scale to zero, else 0
    max_held_requests: int | None = None  # a front knob; None: the router's own default
    args: tuple[str, ...] = ()
    # spec.router.fairSharing, .priorities and .tracing: front knobs with no CRD default, so
    # None (unset) renders no flag and the router's own default applies
    max_in_flight_per_member: int | None = None
    max_waiting: int | None = None
    max_wait_seconds: float | None = None
    reserve_per_tenant: int | None = None
    objective_priorities: str | None = None  # spec.router.priorities
    default_ttft_objective_ms: int | None = None
    otlp_endpoint: str | None = None
    trace_sample_ratio: float | None = None


NESTED = ("fairSharing", "priorities", "tracing")  # objects under spec.router whose fields are knobs


def parse_router(data: Any) -> RouterSpec:
    f = Fields(data, "spec.router")
    service_type = f.text("serviceType", DEFAULT_SERVICE_TYPE)
    if service_type not in SERVICE_TYPES:
        raise SpecError(f"spec.router.serviceType must be one of {', '.join(SERVICE_TYPES)}")
    node_port = f.integer_or_none("nodePort")
    if node_port is not None and service_type == "ClusterIP":
        raise SpecError("spec.router.nodePort needs spec.router.serviceType NodePort or LoadBalancer")
    return RouterSpec(
        replicas=f.integer("replicas", DEFAULT_ROUTER_REPLICAS),
        image=f.text_or_none("image"),
        image_pull_policy=f.text_or_none("imagePullPolicy"),
        resources=f.object("resources"),
        service_type=service_type,
        port=f.integer("port", DEFAULT_SERVICE_PORT),
        node_port=node_port,
        service_annotations=f.string_map("serviceAnnotations"),
        args=f.strings("args"),
        **read_knobs(f, FRONT_KNOBS),
        **_nested_knobs(f),
    )


def _nested_knobs(f: Fields) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in NESTED:
        values |= read_knobs(Fields(f.object(key), f"{f.path}.{key}"), FRONT_KNOBS)
    # Relates two fields, like the CRD's hand-written CEL rule of the same message.
    if values["trace_sample_ratio"] is not None and values["otlp_endpoint"] is None:
        raise SpecError("spec.router.tracing.sampleRatio needs spec.router.tracing.otlpEndpoint, the collector")
    return values
