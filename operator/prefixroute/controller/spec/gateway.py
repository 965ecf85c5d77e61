"""spec.gateway: the model behind a Gateway API Inference Extension gateway.

When enabled the operator creates an InferencePool over the engine pods whose
endpointPickerRef names an Endpoint Picker it runs (`prefixroute epp`, Deployment and
Service), so a conformant gateway (Istio, agentgateway, an Envoy-based gateway) routes with
prefixroute and carries the bytes itself. The router is kept unless `router: false`; at
least one front must stay (the schema says so too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields, Obj

FAILURE_MODES = ("FailClose", "FailOpen")
DEFAULT_FAILURE_MODE = "FailClose"
DEFAULT_EPP_REPLICAS = 2


@dataclass(frozen=True)
class GatewaySpec:
    enabled: bool = False
    router: bool = True  # keep the router Deployment and Service beside the gateway's front
    failure_mode: str = DEFAULT_FAILURE_MODE  # the InferencePool's endpointPickerRef.failureMode
    replicas: int = DEFAULT_EPP_REPLICAS  # Endpoint Picker pods
    image: str | None = None
    image_pull_policy: str | None = None
    resources: Obj = field(default_factory=dict)
    args: tuple[str, ...] = ()

    @property
    def router_live(self) -> bool:
        return self.router or not self.enabled


def parse_gateway(data: Any) -> GatewaySpec:
    f = Fields(data, "spec.gateway")
    enabled = f.flag("enabled", False)
    router = f.flag("router", True)
    if not enabled and not router:
        raise SpecError("spec.gateway.router may be false only with spec.gateway.enabled: one front must serve")
    failure_mode = f.text("failureMode", DEFAULT_FAILURE_MODE)
    if failure_mode not in FAILURE_MODES:
        raise SpecError(f"spec.gateway.failureMode must be one of {', '.join(FAILURE_MODES)}")
    replicas = f.integer("replicas", DEFAULT_EPP_REPLICAS)
    if replicas < 1:
        raise SpecError("spec.gateway.replicas must be at least 1")
    return GatewaySpec(
        enabled=enabled,
        router=router,
        failure_mode=failure_mode,
        replicas=replicas,
        image=f.text_or_none("image"),
        image_pull_policy=f.text_or_none("imagePullPolicy"),
        resources=f.object("resources"),
        args=f.strings("args"),
    )
