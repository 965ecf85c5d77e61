"""The router's identity: it may read its own PrefixRoutedModel (for status.ring), nothing else."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import object_meta
from prefixroute.controller.names import COMPONENT_ROUTER, router_name
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import GROUP, PLURAL


def router_service_account(ref: ModelRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(ref, router_name(ref.name), COMPONENT_ROUTER),
    }


def router_role(ref: ModelRef) -> dict[str, Any]:
    """resourceNames pins the Role to this one resource; list and watch then work only with
    a metadata.name field selector, which is how the router watches it."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(ref, router_name(ref.name), COMPONENT_ROUTER),
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [PLURAL],
                "resourceNames": [ref.name],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": [ref.name], "verbs": ["get"]},
        ],
    }


def router_role_binding(ref: ModelRef) -> dict[str, Any]:
    name = router_name(ref.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(ref, name, COMPONENT_ROUTER),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
