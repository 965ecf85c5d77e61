"""status.ring from the engine pods (pure).

A member is an engine pod that is Ready, has an IP and is not being deleted: a pod with a
deletionTimestamp leaves the ring at once, before its server stops (its preStop pause
gives routers time to notice). Members are sorted by pod name and the version is a hash
of the member list, so equal pods give an equal ring, in every operator replica.

A member's weight: the pod's ``prefixroute.io/weight`` annotation (a person, kept as set),
else the autoscaler's, else 1 — the last two scaled by slow start
(``routing.slow_start``: a pod that turned Ready less than spec.engine.slowStartSeconds ago,
in a fleet with a warm member, ramps up from a tenth), whether or not the autoscaler runs.
The ready time is the pod's Ready condition's lastTransitionTime, so every operator replica
and every restart computes the same ramp.

A member's ``adapters``: the LoRA adapters the adapter sync confirmed registered on the pod
(its ``prefixroute.io/adapters`` annotation, adapter_sync.py); left out while the pod has
none (unknown: the routers let such a member serve any adapter).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from prefixroute.controller.hashing import stable_hash
from prefixroute.controller.names import (
    ANNOTATION_ADAPTERS,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_WEIGHT,
    COMPONENT_ENGINE,
    ENGINE_PORT_NAME,
    LABEL_COMPONENT,
    LABEL_MODEL,
    MODEL_DOWNLOAD_CONTAINER,
)
from prefixroute.routing.slow_start import ramped

Pod = Mapping[str, Any]
KEPT_ANNOTATIONS = (ANNOTATION_WEIGHT, ANNOTATION_SPEC_HASH, ANNOTATION_ADAPTERS)


def _kept_condition(found: Mapping[str, Any]) -> bool:
    kind = found.get("type")
    return kind == "Ready" or (kind == "PodScheduled" and found.get("status") == "False")


def unscheduled(pod: Pod) -> str | None:
    """The scheduler's reason for not placing this pod yet (its PodScheduled condition), or None."""
    for found in (pod.get("status") or {}).get("conditions") or ():
        if found.get("type") == "PodScheduled" and found.get("status") == "False":
            return str(found.get("message") or found.get("reason") or "Unschedulable")
    return None


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """The few fields of a pod the ring and status need, kept in the operator's index
    instead of whole pods (pod bodies are large and clusters have many)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    annotations = meta.get("annotations") or {}
    spec = body.get("spec") or {}
    downloads = [
        {k: v for k, v in c.items() if k in ("name", "state", "lastState")}
        for c in status.get("initContainerStatuses") or []
        if c.get("name") == MODEL_DOWNLOAD_CONTAINER
    ]
    ports = [
        p
        for c in spec.get("containers") or []
        if c.get("name") == "engine"
        for p in c.get("ports") or []
        if p.get("name") == ENGINE_PORT_NAME
    ]
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": {k: v for k, v in (meta.get("labels") or {}).items() if k in (LABEL_COMPONENT, LABEL_MODEL)},
            "annotations": {k: v for k, v in annotations.items() if k in KEPT_ANNOTATIONS},
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {
            **({"containers": [{"name": "engine", "ports": ports}]} if ports else {}),
            **({"nodeName": spec["nodeName"]} if spec.get("nodeName") else {}),
        },
        "status": {
            "podIP": status.get("podIP"),
            "phase": status.get("phase"),
            # Ready for the ring; PodScheduled only while the scheduler cannot place the pod (why, for Ready)
            "conditions": [c for c in status.get("conditions") or [] if _kept_condition(c)],
            # a per-node model cache's download, which status.modelCache follows (node_cache_status)
            **({"initContainerStatuses": downloads} if downloads else {}),
        },
    }


def component(pod: Pod) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT)


def terminating(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(pod: Pod) -> bool:
    status = pod.get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def is_member(pod: Pod) -> bool:
    """Ready, with an IP, and not being deleted."""
    return not terminating(pod) and bool((pod.get("status") or {}).get("podIP")) and is_ready(pod)


def pod_port(pod: Pod, default: int) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == ENGINE_PORT_NAME and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return default


def _weight(value: Any) -> float | None:
    try:
        weight = float(value)
    except (TypeError, ValueError):
        return None
    return weight if math.isfinite(weight) and weight >= 0 else None


def pod_weight(pod: Pod, weights: Mapping[str, Any]) -> float:
    """The pod's annotation (a person or a drain wins), else the autoscaler's weight from
    status.autoscaling.weights, else 1."""
    meta = pod.get("metadata") or {}
    for candidate in ((meta.get("annotations") or {}).get(ANNOTATION_WEIGHT), weights.get(str(meta.get("name")))):
        weight = _weight(candidate)
        if weight is not None:
            return weight
    return 1.0


def address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def ready_since(pod: Pod) -> datetime | None:
    """When the pod last turned Ready (its Ready condition's lastTransitionTime), if known."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                except ValueError:
                    return None
    return None


def pod_adapters(pod: Pod) -> list[str] | None:
    """The adapters the operator confirmed registered on the pod (its annotation), sorted;
    None when it has not said (the ring leaves the member's ``adapters`` out: unknown)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ADAPTERS)
    if not isinstance(value, str):
        return None
    return sorted({name for name in value.split(",") if name})


def _member(pod: Pod, port: int, weight: float) -> dict[str, Any]:
    member: dict[str, Any] = {
        "pod": str(pod["metadata"]["name"]),
        "address": address(str(pod["status"]["podIP"]), pod_port(pod, port)),
        "weight": weight,
        "ready": True,
    }
    adapters = pod_adapters(pod)
    if adapters is not None:
        member["adapters"] = adapters
    return member


def _annotated(pod: Pod) -> bool:
    return _weight(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_WEIGHT)) is not None


def member_ages(pods: Iterable[Pod], now: datetime) -> dict[str, float | None]:
    """Seconds since each ring member turned Ready (None: unknown)."""
    out: dict[str, float | None] = {}
    for pod in pods:
        if component(pod) == COMPONENT_ENGINE and is_member(pod):
            since = ready_since(pod)
            out[str(pod["metadata"]["name"])] = None if since is None else (now - since).total_seconds()
    return out


def compute_ring(
    pods: Iterable[Pod],
    port: int,
    weights: Mapping[str, Any] | None = None,
    *,
    now: datetime | None = None,
    slow_start_seconds: float = 0.0,
) -> dict[str, Any]:
    """The ring document of docs/contracts.md: {version, members: [{pod, address, weight, ready,
    adapters}]}, ``adapters`` only on a pod the adapter sync has annotated.
    With ``now`` and ``slow_start_seconds``, new members' weights ramp (module docstring)."""
    weights = weights or {}
    members_pods = sorted(
        (pod for pod in pods if component(pod) == COMPONENT_ENGINE and is_member(pod)),
        key=lambda pod: str(pod["metadata"]["name"]),
    )
    by_name = {str(pod["metadata"]["name"]): pod_weight(pod, weights) for pod in members_pods}
    if now is not None and slow_start_seconds > 0:
        ages = member_ages(members_pods, now)
        # a person's weight is kept as set: such members count as warm and are not ramped
        ages.update({str(p["metadata"]["name"]): None for p in members_pods if _annotated(p)})
        by_name = ramped(by_name, ages, slow_start_seconds)
    members = [_member(pod, port, by_name[str(pod["metadata"]["name"])]) for pod in members_pods]
    return {"version": stable_hash(members, 12), "members": members}


def same_members(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether two rings have the same members at the same addresses (weights aside)."""
    if old is None:
        return False

    def key(ring: Mapping[str, Any]) -> list[tuple[Any, Any]]:
        return [(m.get("pod"), m.get("address")) for m in ring.get("members") or ()]

    return key(old) == key(new)


def ramping(pods: Iterable[Pod], now: datetime, slow_start_seconds: float, margin: float = 5.0) -> bool:
    """Whether some member's slow start is under way (or just ended): its ring needs publishing
    again as time passes, not only when a pod changes."""
    if slow_start_seconds <= 0:
        return False
    # Asked every second for every model: the Ready time first (most members are old), the
    # rest only for a member that turned Ready lately.
    since = now - timedelta(seconds=slow_start_seconds + margin)
    for pod in pods:
        ready = ready_since(pod)
        if ready is not None and ready > since and component(pod) == COMPONENT_ENGINE and is_member(pod):
            return True
    return False
