"""The model's NetworkPolicies (spec.networkPolicy.enabled): engines answer only this model's
routers, routers answer only the listed clients; the listed Prometheus scrapes both.

Two policies, because one selects the pods its rules protect: ``NAME-engine`` over the engine
pods (ingress on the engine port from this model's router pods and ``prometheus``, and in
precise mode on the KV event ports from its router pods and, with spec.gateway, its endpoint
picker pods, which follow the events too) and
``NAME-router`` over the router pods (ingress on the router port from ``clients`` and
``prometheus``, from anywhere when no client is listed; on the peer port from the other
router pods, whose reports each replica follows: front.peers). With spec.gateway the engine port
also admits the picker pods (which scrape the engines' /metrics) and ``clients``: the gateway
sends each request straight to the engine its picker chose, so the gateway's proxy is a
client of the engines — from anywhere when no client is listed, as for the router.

A model with LoRA adapters (spec.adapters) has its engine port open to ``operator`` too (by
default the operator's pods in prefixroute-system): the operator loads and unloads adapters
through the engines' own API (controller.adapter_sync).

Ingress only: engines still reach model registries and the routers the API server. A
NetworkPolicy cannot tell paths apart, so ``prometheus`` reaches the API port too
(docs/security.md).
"""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import object_meta, selector_labels
from prefixroute.controller.names import (
    COMPONENT_ENGINE,
    COMPONENT_EPP,
    COMPONENT_ROUTER,
    PEER_PORT,
    ROUTER_PORT,
    engine_name,
    router_name,
)
from prefixroute.controller.spec.model import ModelRef, ModelSpec

KIND = "NetworkPolicy"


def _policy(
    ref: ModelRef,
    name: str,
    component: str,
    port: int,
    sources: list[dict[str, Any]],
    more: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"}]}
    if sources:
        rule["from"] = sources
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": KIND,
        "metadata": object_meta(ref, name, component),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ref, component)},
            "policyTypes": ["Ingress"],
            "ingress": [rule, *(more or [])],
        },
    }


def network_policies(ref: ModelRef, spec: ModelSpec, event_ports: tuple[int, ...] = ()) -> tuple[dict[str, Any], ...]:
    """The policies when spec.networkPolicy is enabled, else none. `event_ports`: the engines'
    KV event ports (precise mode), which this model's fronts alone may reach: its routers and,
    with spec.gateway enabled, its endpoint pickers."""
    policy = spec.network_policy
    if not policy.enabled:
        return ()
    scrapers = [dict(p) for p in policy.prometheus]
    routers = {"podSelector": {"matchLabels": selector_labels(ref, COMPONENT_ROUTER)}}
    clients = [dict(p) for p in policy.clients]
    followers = [routers]
    if spec.gateway.enabled:
        followers.append({"podSelector": {"matchLabels": selector_labels(ref, COMPONENT_EPP)}})
    events = (
        [{"ports": [{"port": p, "protocol": "TCP"} for p in event_ports], "from": followers}] if event_ports else []
    )
    if not spec.gateway.enabled:
        callers = [routers, *scrapers]
    else:
        # The gateway proxies each request to the engine its picker chose: the engines now have
        # the model's clients (when none are listed, anyone) and the pickers, which scrape them.
        callers = [*followers, *scrapers, *clients] if clients else []
    if spec.adapters and callers:  # (no callers: the port is open to anyone already)
        callers = [*callers, *(dict(p) for p in policy.operator)]
    return (
        _policy(ref, engine_name(ref.name), COMPONENT_ENGINE, spec.engine.port, callers, events),
        _policy(
            ref,
            router_name(ref.name),
            COMPONENT_ROUTER,
            ROUTER_PORT,
            [*clients, *scrapers] if clients else [],
            [{"ports": [{"port": PEER_PORT, "protocol": "TCP"}], "from": [routers]}],
        ),
    )


def policy_names(ref: ModelRef) -> tuple[str, ...]:
    """Every policy name the operator may have made for the model (removed when disabled)."""
    return (engine_name(ref.name), router_name(ref.name))
