"""spec.networkPolicy: who may reach the model's pods, when the operator renders policies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixroute.controller.spec.fields import Fields, Obj

# The operator's pods as the install makes them (manifests/base, the chart's default
# namespace): the one peer that reaches engines to load LoRA adapters (controller.adapter_sync).
DEFAULT_OPERATOR_PEERS: tuple[Obj, ...] = (
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prefixroute-system"}},
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/name": "prefixroute", "app.kubernetes.io/component": "operator"}
        },
    },
)


@dataclass(frozen=True)
class NetworkPolicySpec:
    """Off by default: a policy must admit the site's own clients and scrapers, which only the
    user knows. On, the engines accept only this model's routers (and ``prometheus``) and
    the routers only ``clients`` (anyone when none are listed) and ``prometheus``."""

    enabled: bool = False
    clients: tuple[Obj, ...] = ()  # core/v1 NetworkPolicyPeer, e.g. {namespaceSelector: ...}
    prometheus: tuple[Obj, ...] = ()  # peers that scrape /metrics of engines and routers
    operator: tuple[Obj, ...] = DEFAULT_OPERATOR_PEERS  # admitted to the engines when the model has adapters


def parse_network_policy(data: Any) -> NetworkPolicySpec:
    f = Fields(data, "spec.networkPolicy")
    return NetworkPolicySpec(
        enabled=f.flag("enabled", False),
        clients=f.objects("clients"),
        prometheus=f.objects("prometheus"),
        operator=f.objects("operator") if f.data.get("operator") is not None else DEFAULT_OPERATOR_PEERS,
    )
