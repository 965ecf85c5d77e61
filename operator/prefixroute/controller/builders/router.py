"""The router Deployment: `prefixroute router` following this resource's status.ring."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import (
    labels,
    object_meta,
    scrape_annotations,
    selector_labels,
    with_spec_hash,
)
from prefixroute.controller.builders.pod import downward_env, restricted_security_context, scratch_mount, scratch_volume
from prefixroute.controller.engines.base import HEALTH_PATH, METRICS_PATH, POD_IP_ARG
from prefixroute.controller.names import COMPONENT_ROUTER, IMAGE, ROUTER_PORT, ROUTER_PORT_NAME, router_name
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import RouterSpec
from prefixroute.controller.spec.routing import RoutingSpec

DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}


def _number(value: float) -> str:
    """1.25 → '1.25', 2.0 → '2': flags read the same as the spec."""
    return format(value, "g")


def routing_flags(routing: RoutingSpec) -> list[str]:
    """The routing and tenant flags of both fronts (`prefixroute router` and `prefixroute epp`
    take the same ones); every one explicit, so a front never falls back to a default that
    differs from the spec."""
    config = routing.config
    flags = [
        "--strategy",
        config.strategy,
        "--block-size",
        str(config.block_size),
        "--prefix-blocks",
        str(config.prefix_blocks),
        "--load-factor",
        _number(config.load_factor),
        "--load-slack",
        str(config.load_slack),
        "--queue-penalty",
        _number(config.queue_penalty),
        "--virtual-nodes",
        str(config.virtual_nodes),
    ]
    if routing.tenant_header:
        flags += ["--tenant-header", routing.tenant_header]
    if config.isolate_tenants:
        flags.append("--isolate-tenants")
    return flags


def router_args(ref: ModelRef, routing: RoutingSpec, router: RouterSpec) -> list[str]:
    """The command line from docs/contracts.md."""
    args = [
        "router",
        "--host",
        POD_IP_ARG,
        "--port",
        str(ROUTER_PORT),
        "--resource",
        f"$(POD_NAMESPACE)/{ref.name}",
        *routing_flags(routing),
    ]
    if router.retries is not None:
        args += ["--retries", str(router.retries)]
    return args + list(router.args)


def _probe(**timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": HEALTH_PATH, "port": ROUTER_PORT_NAME}, **timing}


def router_pod_template(ref: ModelRef, routing: RoutingSpec, router: RouterSpec) -> tuple[dict[str, Any], str]:
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image or IMAGE,
        "args": router_args(ref, routing, router),
        "ports": [{"name": ROUTER_PORT_NAME, "containerPort": ROUTER_PORT, "protocol": "TCP"}],
        "env": downward_env(),
        "resources": dict(router.resources) if router.resources else DEFAULT_RESOURCES,
        "readinessProbe": _probe(periodSeconds=5, timeoutSeconds=2, failureThreshold=3),
        "livenessProbe": _probe(periodSeconds=10, timeoutSeconds=2, failureThreshold=3),
        "securityContext": restricted_security_context(),
        "volumeMounts": [scratch_mount()],
    }
    if router.image_pull_policy:
        container["imagePullPolicy"] = router.image_pull_policy
    template = {
        "metadata": {
            "labels": labels(ref, COMPONENT_ROUTER),
            "annotations": scrape_annotations(ROUTER_PORT, METRICS_PATH),
        },
        "spec": {
            "serviceAccountName": router_name(ref.name),
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": [scratch_volume()],
        },
    }
    return with_spec_hash(template)


def router_deployment(ref: ModelRef, template: dict[str, Any], replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(ref, router_name(ref.name), COMPONENT_ROUTER),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref, COMPONENT_ROUTER)},
            "template": template,
        },
    }
