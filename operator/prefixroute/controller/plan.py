"""A reconcile's plan: every child object the spec asks for, in apply order (pure).

Building the whole plan before touching the cluster is what keeps a bad spec from leaving
half-built children: ``SpecError`` is raised here, before anything is applied.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prefixroute.controller.adapter_downloads import adapter_job, hub_adapters
from prefixroute.controller.builders.engine import engine_deployment, engine_pod_template
from prefixroute.controller.builders.gateway import (
    epp_deployment,
    epp_endpoint,
    epp_pdb,
    epp_pod_template,
    epp_service,
    inference_pool,
)
from prefixroute.controller.builders.meta import selector_string
from prefixroute.controller.builders.model_cache import cache_claim, download_job, node_download_container
from prefixroute.controller.builders.network import KIND as NETWORK_POLICY
from prefixroute.controller.builders.network import network_policies, policy_names
from prefixroute.controller.builders.pdb import engine_pdb
from prefixroute.controller.builders.rbac import router_role, router_role_binding, router_service_account
from prefixroute.controller.builders.router import router_deployment, router_pod_template
from prefixroute.controller.builders.service import engine_service, router_endpoint, router_service
from prefixroute.controller.engines.base import RenderedEngine
from prefixroute.controller.engines.factory import make_adapter
from prefixroute.controller.errors import SpecError
from prefixroute.controller.model_files import resolved
from prefixroute.controller.names import ANNOTATION_SPEC_HASH, COMPONENT_ENGINE, COMPONENT_EPP, engine_name, pool_name
from prefixroute.controller.precise import (
    KV_EVENTS_PORT,
    KV_EVENTS_PORT_NAME,
    KV_REPLAY_PORT,
    KV_REPLAY_PORT_NAME,
    PreciseRouting,
    precise_routing,
    tokenizer_hub,
)
from prefixroute.controller.spec.model import ModelRef, ModelSpec, engine_replicas, model_ref, parse_spec
from prefixroute.controller.spec.model_source import HubSource, cache_ready
from prefixroute.controller.spec.router import RouterSpec
from prefixroute.crd import POOL_API_VERSION, POOL_KIND


@dataclass(frozen=True)
class Plan:
    ref: ModelRef
    spec: ModelSpec
    objects: tuple[dict[str, Any], ...]
    engine_hash: str  # spec hash of the engine pod template: pods carrying another are outdated
    engine_replicas: int
    selector: str
    router_endpoint: str | None  # None: the router is off (spec.gateway.router false)
    gateway: dict[str, Any] | None = None  # status.gateway: the InferencePool and its picker, when enabled
    absent: tuple[dict[str, Any], ...] = ()  # children to delete after the apply (a pool turned off, ...)
    template_hashes: Mapping[str, str] = field(default_factory=dict)  # Deployment name -> its pod template's hash

    def describe(self, obj: Mapping[str, Any]) -> str:
        return f"{obj['kind']} {obj['metadata']['name']}"

    @property
    def engine_deployment(self) -> dict[str, Any]:
        """The engine Deployment, which the autoscaler applies alone when it changes the
        replica count (the whole object: a server-side apply that left fields out would
        drop them from the operator's ownership)."""
        name = engine_name(self.ref.name)
        return next(o for o in self.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)

    @property
    def checked(self) -> tuple[dict[str, Any], ...]:
        """The objects to dry-run before applying anything. A RoleBinding is left out: the
        API server's escalation check reads the Role it binds, which a dry run never
        created (a real kube-apiserver answered 404 for a new model). Its content depends
        on the resource's name only, so it cannot be made invalid by a spec."""
        return tuple(o for o in self.objects if o["kind"] != "RoleBinding")


def _stub(api_version: str, kind: str, ref: ModelRef, name: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ref.namespace}}


SCALE_FROM_ZERO_HOLD_SECONDS = 60.0
"""How long routers hold requests for a model whose autoscaling may scale it to zero, unless
spec.router.holdSeconds says: long enough for the autoscaler to see them and an engine to
start (engine-sim: seconds; a GPU engine loading a model may need spec.router.holdSeconds)."""


def router_for(spec: ModelSpec) -> RouterSpec:
    """spec.router as rendered: a model that may scale to zero holds requests by default."""
    router = spec.router
    auto = spec.autoscaling
    if router.hold_seconds is None and auto.enabled and not auto.dry_run and auto.min_replicas == 0:
        return replace(router, hold_seconds=SCALE_FROM_ZERO_HOLD_SECONDS)
    return router


def with_events(rendered: RenderedEngine, precise: PreciseRouting | None) -> RenderedEngine:
    """The engine as rendered, publishing its KV cache events in precise mode (flags and ports)."""
    if precise is None:
        return rendered
    ports = (
        {"name": KV_EVENTS_PORT_NAME, "containerPort": KV_EVENTS_PORT, "protocol": "TCP"},
        {"name": KV_REPLAY_PORT_NAME, "containerPort": KV_REPLAY_PORT, "protocol": "TCP"},
    )
    return replace(rendered, args=(*rendered.args, *precise.engine_args), ports=(*rendered.ports, *ports))


def with_node_download(spec: ModelSpec) -> ModelSpec:
    """With a per-node cache, the engine pods fill their node's folder before the engine
    starts (an init container): there is no claim and no Job to wait for."""
    model = spec.model
    if model is None or not model.per_node:
        return spec
    assert isinstance(model.source, HubSource)  # spec.model_source allows a cache for hub models only
    download = node_download_container(model.source, spec.engine)
    return replace(spec, engine=replace(spec.engine, init_containers=(*spec.engine.init_containers, download)))


def model_cache_objects(ref: ModelRef, spec: ModelSpec) -> list[dict[str, Any]]:
    """The cache's claim and the Job that fills it, when spec.model asks for a cache in a
    claim, and a Job per hub adapter (spec.adapters), each into the same claim. An adapter's
    Job runs while the engines serve: the sync loads the adapter once its marker link is there."""
    model = spec.model
    if model is None or model.cache is None or model.per_node:
        return []
    assert isinstance(model.source, HubSource)  # spec.model_source allows a cache for hub models only
    adapters = [adapter_job(ref, spec.engine, a) for a in hub_adapters(spec.adapters)]
    return [cache_claim(ref, model.cache), download_job(ref, model.source, spec.engine), *adapters]


def make_plan(ref: ModelRef, spec: ModelSpec, status: Mapping[str, Any] | None = None) -> Plan:
    spec = with_node_download(resolved(ref.name, spec, ref.namespace))  # spec.model folded into the engine
    precise = precise_routing(spec.engine, spec.routing, tokenizer_hub(spec.model))
    rendered = with_events(make_adapter(spec.engine.kind).render(spec.engine), precise)
    engine_template, engine_hash = engine_pod_template(ref, spec.engine, rendered)
    replicas = engine_replicas(spec, status)
    gateway = spec.gateway
    lora = spec.engine.lora
    # Fronts wait for a model cache too: in precise mode they read the tokenizer from it.
    fronts_on = cache_ready(spec.model, status)
    status = status or {}
    # RBAC and Services first, so pods find their ServiceAccount; Deployments last
    rbac: list[dict[str, Any]] = []
    services = [engine_service(ref, spec.engine)]
    deployments = [engine_deployment(ref, engine_template, replicas, spec.engine.rollout)]
    event_ports = (KV_EVENTS_PORT, KV_REPLAY_PORT) if precise is not None else ()
    others = [engine_pdb(ref), *network_policies(ref, spec, event_ports)]  # policies before the pods they protect
    absent: tuple[dict[str, Any], ...] = ()
    if gateway.router_live:
        router_template, _ = router_pod_template(ref, spec.routing, router_for(spec), spec.auth, precise, lora)
        rbac += [router_service_account(ref), router_role(ref), router_role_binding(ref)]
        services.append(router_service(ref, spec.router))
        deployments.append(router_deployment(ref, router_template, spec.router.replicas if fronts_on else 0))
    elif status.get("routerEndpoint"):
        # The router was live until this spec turned it off: its pods go (the Deployment is
        # parked at zero; the operator holds no delete on Deployments, see e2e/test_rbac.py),
        # the rest is inert and goes with the resource.
        router_template, _ = router_pod_template(ref, spec.routing, router_for(spec), spec.auth, precise, lora)
        deployments.append(router_deployment(ref, router_template, 0))
    if gateway.enabled:
        epp_template, _ = epp_pod_template(ref, spec.routing, gateway, spec.router, spec.auth, precise, lora)
        rbac += [
            router_service_account(ref, COMPONENT_EPP),
            router_role(ref, COMPONENT_EPP),
            router_role_binding(ref, COMPONENT_EPP),
        ]
        services.append(epp_service(ref))
        others += [epp_pdb(ref), inference_pool(ref, spec.engine, gateway)]
        deployments.append(epp_deployment(ref, epp_template, gateway.replicas if fronts_on else 0))
    elif status.get("gateway"):
        # A gateway must stop sending here: the pool is deleted and the pickers parked at zero.
        absent += (_stub(POOL_API_VERSION, POOL_KIND, ref, pool_name(ref.name)),)
        epp_template, _ = epp_pod_template(ref, spec.routing, gateway, spec.router, spec.auth, precise, lora)
        deployments.append(epp_deployment(ref, epp_template, 0))
    if not spec.network_policy.enabled:  # never made, or turned off: deleting a missing one is no error
        absent += tuple(_stub("networking.k8s.io/v1", NETWORK_POLICY, ref, n) for n in policy_names(ref))
    objects = (*rbac, *services, *model_cache_objects(ref, spec), *others, *deployments)
    hashes = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
        for d in deployments
    }
    return Plan(
        ref=ref,
        spec=spec,
        objects=objects,
        engine_hash=engine_hash,
        engine_replicas=replicas,
        selector=selector_string(ref, COMPONENT_ENGINE),
        router_endpoint=router_endpoint(ref, spec.router) if gateway.router_live else None,
        gateway=(
            {
                "inferencePool": pool_name(ref.name),
                "endpointPicker": epp_endpoint(ref),
                "failureMode": gateway.failure_mode,
            }
            if gateway.enabled
            else None
        ),
        absent=absent,
        template_hashes=hashes,
    )


def plan_for(body: Mapping[str, Any]) -> Plan:
    """The plan for a whole PrefixRoutedModel body; raises SpecError."""
    return make_plan(model_ref(body), parse_spec(body.get("spec")), body.get("status"))


def plan_key(body: Mapping[str, Any]) -> Hashable:
    """Everything ``plan_for`` reads: the model's identity, its spec, and the four things of
    status a plan depends on (the autoscaler's replica count, whether a router and a gateway
    were published, which source the model cache holds Ready)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    decided = (status.get("autoscaling") or {}).get("desiredReplicas")
    cache = status.get("modelCache") or {}
    return (
        meta.get("namespace"),
        meta.get("name"),
        meta.get("uid"),
        meta.get("generation"),
        json.dumps(body.get("spec"), sort_keys=True, default=str),
        repr(decided),
        bool(status.get("routerEndpoint")),
        bool(status.get("gateway")),
        (cache.get("phase"), cache.get("source")),
    )


class StatusPlans:
    """Plans for status and drift checks, kept by ``plan_key`` without their objects.

    Every pod event, every Deployment event and every ring step asks what the plan says
    (the engine hash, the replica count, the endpoints) while the plan rarely changes:
    rendering it whole each time was a fifth of the operator's CPU at a thousand models.
    The objects are dropped (a whole plan is some 30 KiB, its status part a few), and the
    oldest plans go past ``size``. A spec that cannot be honoured is kept as its SpecError."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._plans: OrderedDict[Hashable, Plan | SpecError] = OrderedDict()

    def __call__(self, body: Mapping[str, Any]) -> Plan:
        """``plan_for(body)`` without objects; raises SpecError as it does."""
        key = plan_key(body)
        found = self._plans.get(key)
        if found is None:
            try:
                found = replace(plan_for(body), objects=(), absent=())
            except SpecError as exc:
                found = exc
            self._plans[key] = found
            while len(self._plans) > self.size:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        if isinstance(found, SpecError):
            raise found
        return found
