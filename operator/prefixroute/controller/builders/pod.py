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


SCRATCH_VOLUME = "prefixroute-tmp"
SCRATCH_PATH = "/tmp"


def restricted_security_context() -> dict[str, Any]:
    """For our own containers: what the 'restricted' Pod Security Standard asks, and a
    read-only root file system (they write nothing but, at most, scratch files in /tmp,
    which `scratch_volume` provides)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def hardened_security_context() -> dict[str, Any]:
    """For third-party engine images (vLLM, SGLang): no privilege escalation, no Linux
    capabilities, the runtime's default seccomp profile — nothing a model server needs.
    Their user and root file system are left as the image has them: the upstream images run
    as root and write caches (Hugging Face, torch.compile, Triton, FlashInfer JIT) under
    their home and package directories, often onto root-owned shared model volumes; see
    docs/security.md."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def scratch_volume() -> dict[str, Any]:
    """A small writable /tmp for a container whose root file system is read-only."""
    return {"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}


def scratch_mount() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH}


def pre_stop_pause(seconds: int = 5) -> dict[str, Any]:
    """A short pause before SIGTERM: the pod has already left the ring (the operator drops
    pods with a deletionTimestamp), so routers stop sending before the server stops."""
    return {"preStop": {"sleep": {"seconds": seconds}}}
