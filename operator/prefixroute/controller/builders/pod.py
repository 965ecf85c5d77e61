"""Pieces of pod specs shared by the engine and the router."""

from __future__ import annotations

from typing import Any

DOWNWARD_ENV = (("POD_IP", "status.podIP"), ("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))
RESERVED_ENV = tuple(name for name, _ in DOWNWARD_ENV)

RUN_AS_USER = 65532
"""Our image runs as any non-root user; this one is the conventional 'nonroot'."""


def downward_env() -> list[dict[str, Any]]:
    """POD_IP, POD_NAME, POD_NAMESPACE from the downward API: our containers bind to
    $(POD_IP) and the router finds its resource in $(POD_NAMESPACE) (docs/contracts.md)."""
    return [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in DOWNWARD_ENV]


def restricted_security_context() -> dict[str, Any]:
    """For our own containers: what the 'restricted' Pod Security Standard asks."""
    return {
        "runAsNonRoot": True, "runAsUser": RUN_AS_USER, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }


def pre_stop_pause(seconds: int = 5) -> dict[str, Any]:
    """A short pause before SIGTERM: the pod has already left the ring (the operator drops
    pods with a deletionTimestamp), so routers stop sending before the server stops."""
    return {"preStop": {"sleep": {"seconds": seconds}}}
