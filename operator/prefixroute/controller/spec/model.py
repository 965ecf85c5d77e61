"""The whole spec, the resource's identity, and the one rule for the engine replica count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.adapters import AdapterSpec, parse_adapters
from prefixroute.controller.spec.auth import AuthSpec, parse_auth
from prefixroute.controller.spec.engine import EngineSpec, parse_engine
from prefixroute.controller.spec.fields import Fields
from prefixroute.controller.spec.gateway import GatewaySpec, parse_gateway
from prefixroute.controller.spec.model_source import ModelSource, cache_ready, parse_model_source
from prefixroute.controller.spec.network import NetworkPolicySpec, parse_network_policy
from prefixroute.controller.spec.router import RouterSpec, parse_router
from prefixroute.controller.spec.routing import RoutingSpec, parse_routing
from prefixroute.crd import API_VERSION, KIND

DEFAULT_REPLICAS = 1


@dataclass(frozen=True)
class ModelRef:
    """Who a child belongs to: enough for owner references, events and status patches."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def object_reference(self) -> dict[str, Any]:
        """The body kopf's event posting and our edge need to address the resource."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
        }


@dataclass(frozen=True)
class ModelSpec:
    engine: EngineSpec
    replicas: int
    routing: RoutingSpec
    router: RouterSpec
    autoscaling: AutoscalingSettings
    gateway: GatewaySpec = field(default_factory=GatewaySpec)
    network_policy: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)
    auth: AuthSpec = field(default_factory=AuthSpec)
    model: ModelSource | None = None  # spec.model; controller/model_files.py folds it into engine
    adapters: tuple[AdapterSpec, ...] = ()  # spec.adapters; checked against the rest in model_files.resolved


def model_ref(body: Mapping[str, Any]) -> ModelRef:
    meta = body.get("metadata") or {}
    return ModelRef(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
    )


def parse_spec(data: Any) -> ModelSpec:
    f = Fields(data, "spec")
    replicas = f.integer("replicas", DEFAULT_REPLICAS)
    if replicas < 0:
        raise SpecError("spec.replicas must not be negative")
    try:
        autoscaling = AutoscalingSettings.from_spec(f.object("autoscaling"))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"spec.autoscaling: {exc}") from exc
    auth = parse_auth(f.object("auth"))
    gateway = parse_gateway(f.object("gateway"))
    if auth.keys_on and not gateway.router_live:
        raise SpecError(
            "spec.auth is checked by the router: with spec.gateway.router false no front would check API keys"
        )
    return ModelSpec(
        engine=parse_engine(f.object("engine")),
        replicas=replicas,
        routing=parse_routing(f.object("routing"), tenant_from_keys=auth.keys_on),
        router=parse_router(f.object("router")),
        autoscaling=autoscaling,
        gateway=gateway,
        network_policy=parse_network_policy(f.object("networkPolicy")),
        auth=auth,
        model=parse_model_source(f.data.get("model")),
        adapters=parse_adapters(f.data.get("adapters")),
    )


def engine_replicas(spec: ModelSpec, status: Mapping[str, Any] | None) -> int:
    """How many engine pods the engine Deployment should run.

    Without built-in autoscaling this is spec.replicas (which `kubectl scale` or an HPA may
    set through the scale subresource). With it, the operator owns the count: the
    autoscaler's last decision in status.autoscaling.desiredReplicas (spec.replicas until it
    has decided), kept within [minReplicas, maxReplicas]. The user's spec is never written.
    In dry-run mode the autoscaler only recommends: spec.replicas rules, as without it.
    With a model cache, none until the cache holds the model (``cache_ready``).
    """
    if not cache_ready(spec.model, status):
        return 0
    settings = spec.autoscaling
    if not settings.enabled or settings.dry_run:
        return spec.replicas
    decided = ((status or {}).get("autoscaling") or {}).get("desiredReplicas")
    wanted = decided if isinstance(decided, int) and not isinstance(decided, bool) else spec.replicas
    return max(settings.min_replicas, min(settings.max_replicas, wanted))
