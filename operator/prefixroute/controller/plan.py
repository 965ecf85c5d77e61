"""A reconcile's plan: every child object the spec asks for, in apply order (pure).

Building the whole plan before touching the cluster is what keeps a bad spec from leaving
half-built children: ``SpecError`` is raised here, before anything is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefixroute.controller.builders.engine import engine_deployment, engine_pod_template
from prefixroute.controller.builders.meta import selector_string
from prefixroute.controller.builders.pdb import engine_pdb
from prefixroute.controller.builders.rbac import router_role, router_role_binding, router_service_account
from prefixroute.controller.builders.router import router_deployment, router_pod_template
from prefixroute.controller.builders.service import engine_service, router_endpoint, router_service
from prefixroute.controller.engines.factory import make_adapter
from prefixroute.controller.names import COMPONENT_ENGINE, engine_name
from prefixroute.controller.spec.model import ModelRef, ModelSpec, engine_replicas, model_ref, parse_spec


@dataclass(frozen=True)
class Plan:
    ref: ModelRef
    spec: ModelSpec
    objects: tuple[dict[str, Any], ...]
    engine_hash: str  # spec hash of the engine pod template: pods carrying another are outdated
    engine_replicas: int
    selector: str
    router_endpoint: str

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


def make_plan(ref: ModelRef, spec: ModelSpec, status: Mapping[str, Any] | None = None) -> Plan:
    rendered = make_adapter(spec.engine.kind).render(spec.engine)
    engine_template, engine_hash = engine_pod_template(ref, spec.engine, rendered)
    router_template, _ = router_pod_template(ref, spec.routing, spec.router)
    replicas = engine_replicas(spec, status)
    # RBAC and Services first, so pods find their ServiceAccount; Deployments last
    objects = (
        router_service_account(ref),
        router_role(ref),
        router_role_binding(ref),
        engine_service(ref, spec.engine),
        router_service(ref, spec.router),
        engine_pdb(ref),
        engine_deployment(ref, engine_template, replicas),
        router_deployment(ref, router_template, spec.router.replicas),
    )
    return Plan(
        ref=ref,
        spec=spec,
        objects=objects,
        engine_hash=engine_hash,
        engine_replicas=replicas,
        selector=selector_string(ref, COMPONENT_ENGINE),
        router_endpoint=router_endpoint(ref, spec.router),
    )


def plan_for(body: Mapping[str, Any]) -> Plan:
    """The plan for a whole PrefixRoutedModel body; raises SpecError."""
    return make_plan(model_ref(body), parse_spec(body.get("spec")), body.get("status"))
