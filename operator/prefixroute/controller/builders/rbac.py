"""The fronts' identities: the router and the Endpoint Picker may each read their own
PrefixRoutedModel (for status.ring) and the EndpointSlices of their namespace (where their
peers are: the replicas of their own Service, front.peers); the picker also the
InferenceObjectives of its namespace (their priorities); nothing else."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import object_meta
from prefixroute.controller.names import COMPONENT_EPP, COMPONENT_ROUTER, epp_name, router_name
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import GROUP, OBJECTIVE_GROUP, OBJECTIVE_PLURAL, PLURAL


def _name(ref: ModelRef, component: str) -> str:
    return epp_name(ref.name) if component == COMPONENT_EPP else router_name(ref.name)


def router_service_account(ref: ModelRef, component: str = COMPONENT_ROUTER) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(ref, _name(ref, component), component),
    }


def router_role(ref: ModelRef, component: str = COMPONENT_ROUTER) -> dict[str, Any]:
    """resourceNames pins the Role to this one resource; list and watch then work only with
    a metadata.name field selector, which is how the router watches it."""
    rules = [
        {
            "apiGroups": [GROUP],
            "resources": [PLURAL],
            "resourceNames": [ref.name],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": [ref.name], "verbs": ["get"]},
        # The replicas' addresses: listed by the label of the front's own Service, which a
        # resourceNames rule cannot pin (slices get generated names).
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    if component == COMPONENT_EPP:
        # The priorities of its pool's InferenceObjectives (epp.objectives): objects users
        # name freely, so listed by namespace, not pinned by name.
        rules.append({"apiGroups": [OBJECTIVE_GROUP], "resources": [OBJECTIVE_PLURAL], "verbs": ["get", "list"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(ref, _name(ref, component), component),
        "rules": rules,
    }


def router_role_binding(ref: ModelRef, component: str = COMPONENT_ROUTER) -> dict[str, Any]:
    name = _name(ref, component)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(ref, name, component),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
