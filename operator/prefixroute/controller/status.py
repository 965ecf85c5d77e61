"""The status a PrefixRoutedModel should show, from its plan and its pods (pure).

Two writers share these functions: the pod watch (ring, counts, Ready, Progressing — within
seconds of a pod changing) and the reconcile (which adds observedGeneration and Degraded).
Both compute from the same inputs, so whichever writes last writes the truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prefixroute.controller.cache_status import cache_condition
from prefixroute.controller.conditions import DEGRADED, PROGRESSING, READY, condition, merge_conditions
from prefixroute.controller.names import ANNOTATION_SPEC_HASH, COMPONENT_ENGINE, COMPONENT_EPP, COMPONENT_ROUTER
from prefixroute.controller.node_cache_status import node_cache_status
from prefixroute.controller.plan import Plan
from prefixroute.controller.ring_status import Pod, component, compute_ring, is_ready, terminating, unscheduled
from prefixroute.controller.spec.engine import DEFAULT_ENGINE_PORT


@dataclass(frozen=True)
class Counts:
    engines: int  # engine pods not being deleted (status.replicas, the scale subresource's)
    ready: int  # ring members
    current: int  # engine pods running the current pod template
    routers_ready: int
    desired: int
    pickers_ready: int = 0  # Endpoint Picker pods (spec.gateway)
    router_live: bool = True  # the fronts the spec asks for
    gateway_live: bool = False
    unscheduled: int = 0  # engine pods the scheduler cannot place yet
    unscheduled_why: str = ""  # the scheduler's word on one of them


def _hash(pod: Pod) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)


def count(
    pods: Sequence[Pod],
    ring: Mapping[str, Any],
    desired: int,
    engine_hash: str | None,
    router_live: bool = True,
    gateway_live: bool = False,
) -> Counts:
    engines = [p for p in pods if component(p) == COMPONENT_ENGINE and not terminating(p)]
    routers = [p for p in pods if component(p) == COMPONENT_ROUTER and not terminating(p)]
    pickers = [p for p in pods if component(p) == COMPONENT_EPP and not terminating(p)]
    current = len(engines) if engine_hash is None else sum(1 for p in engines if _hash(p) == engine_hash)
    waiting = [why for p in engines if (why := unscheduled(p)) is not None]
    return Counts(
        engines=len(engines),
        ready=len(ring["members"]),
        current=current,
        routers_ready=sum(1 for p in routers if is_ready(p)),
        desired=desired,
        pickers_ready=sum(1 for p in pickers if is_ready(p)),
        router_live=router_live,
        gateway_live=gateway_live,
        unscheduled=len(waiting),
        unscheduled_why=waiting[0] if waiting else "",
    )


def front(router_live: bool, gateway_live: bool) -> str:
    """status.front: which front serves the model (`kubectl get prm` shows it)."""
    return "+".join(name for name, live in (("router", router_live), ("gateway", gateway_live)) if live)


def ready_condition(c: Counts) -> dict[str, Any]:
    if c.desired == 0:
        return condition(READY, False, "ScaledToZero", "0 engine replicas are asked for")
    if c.ready == 0 and c.unscheduled:
        return condition(
            READY,
            False,
            "EnginesNotScheduled",
            f"0/{c.desired} engine replicas are ready; {c.unscheduled} engine pod(s) not scheduled: {c.unscheduled_why}",
        )
    if c.ready == 0:
        return condition(
            READY,
            False,
            "NoReadyEngines",
            f"0/{c.desired} engine replicas are ready; waiting for their readiness probes",
        )
    serving = []
    if c.router_live and c.routers_ready:
        serving.append(f"{c.routers_ready} ready router pod(s)")
    if c.gateway_live and c.pickers_ready:
        serving.append(f"{c.pickers_ready} ready endpoint picker pod(s) of the InferencePool")
    if not serving:
        if c.router_live and not c.gateway_live:
            reason, what = "RouterNotReady", "no router pod is"
        elif c.gateway_live and not c.router_live:
            reason, what = "EndpointPickerNotReady", "no endpoint picker pod is"
        else:
            reason, what = "NoFrontReady", "neither a router pod nor an endpoint picker pod is"
        return condition(READY, False, reason, f"{c.ready}/{c.desired} engine replicas are ready but {what}")
    return condition(
        READY, True, "Serving", f"{c.ready}/{c.desired} engine replicas in the ring behind {' and '.join(serving)}"
    )


def progressing_condition(c: Counts) -> dict[str, Any]:
    if c.current < c.engines:
        return condition(
            PROGRESSING, True, "RollingOut", f"{c.current} of {c.engines} engine pods run the current spec"
        )
    if c.engines != c.desired:
        return condition(PROGRESSING, True, "Scaling", f"scaling engines from {c.engines} to {c.desired} replicas")
    if c.ready < c.desired:
        waiting = f"; {c.unscheduled} not scheduled: {c.unscheduled_why}" if c.unscheduled else ""
        return condition(
            PROGRESSING, True, "WaitingForReady", f"{c.ready}/{c.desired} engine replicas are ready{waiting}"
        )
    return condition(
        PROGRESSING, False, "Complete", f"all {c.desired} engine replicas run the current spec and are ready"
    )


def live_status(
    plan: Plan | None, pods: Iterable[Pod], previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The pod-driven part of status. Without a plan (the spec cannot be honoured) the ring
    still follows the pods that exist, and the last published selector/endpoint stay."""
    previous = previous or {}
    pods = list(pods)
    weights = autoscaler_weights(plan, previous)
    port = plan.spec.engine.port if plan else DEFAULT_ENGINE_PORT
    slow_start = plan.spec.engine.slow_start_seconds if plan else 0.0
    ring = compute_ring(pods, port, weights, now=now, slow_start_seconds=slow_start)
    desired = plan.engine_replicas if plan else int(previous.get("desiredReplicas") or 0)
    router_live = plan.router_endpoint is not None if plan else bool(previous.get("routerEndpoint"))
    gateway_live = plan.gateway is not None if plan else bool(previous.get("gateway"))
    counts = count(pods, ring, desired, plan.engine_hash if plan else None, router_live, gateway_live)
    status: dict[str, Any] = {
        "replicas": counts.engines,
        "readyReplicas": counts.ready,
        "desiredReplicas": desired,
        "readyText": f"{counts.ready}/{desired}",
        "ring": ring,
        "conditions": merge_conditions(
            previous.get("conditions"), [ready_condition(counts), progressing_condition(counts)], now
        ),
    }
    if plan:
        status["selector"] = plan.selector
        status["routerEndpoint"] = plan.router_endpoint  # None (removed) with the router off
        status["gateway"] = {**plan.gateway, "readyPickers": counts.pickers_ready} if plan.gateway else None
        status["front"] = front(router_live, gateway_live)
        model = plan.spec.model
        if model is not None and model.per_node:  # the engine pods' own downloads are its only record
            cache = node_cache_status(model.source.identity, pods, plan.engine_hash, previous.get("modelCache"))
            status["modelCache"] = cache
            status["conditions"] = merge_conditions(status["conditions"], [cache_condition(cache)], now)
    return status


def autoscaler_weights(plan: Plan | None, status: Mapping[str, Any]) -> Mapping[str, Any]:
    """status.autoscaling.weights while the autoscaler acts on the resource; {} when
    autoscaling is off or only recommends (dry run), so weights it left behind never
    steer the ring. Without a plan (a spec that cannot be honoured) the ring keeps them."""
    if plan is not None and (not plan.spec.autoscaling.enabled or plan.spec.autoscaling.dry_run):
        return {}
    weights = (status.get("autoscaling") or {}).get("weights") or {}
    return weights if isinstance(weights, Mapping) else {}


def degraded_condition(reason: str, message: str, generation: int) -> dict[str, Any]:
    """Degraded is True for any reason but "Reconciled"."""
    return condition(DEGRADED, reason != "Reconciled", reason, message, generation)


def with_outcome(
    status: Mapping[str, Any], degraded: Mapping[str, Any], generation: int, now: datetime
) -> dict[str, Any]:
    """The reconcile's status: the live part plus Degraded and observedGeneration."""
    return {
        **status,
        "observedGeneration": generation,
        "conditions": merge_conditions(status.get("conditions"), [degraded], now),
    }


def changed_fields(desired: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """Only what differs: a status patch that is empty when nothing changed, so the pod
    watch never writes (and never wakes the routers' watches) for nothing."""
    current = current or {}
    return {k: v for k, v in desired.items() if current.get(k) != v}


def merge_patch(patch: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """``patch`` as a JSON merge patch (RFC 7386) against ``current``: a key that an object
    value no longer has is sent as null, because a merge patch merges objects key by key
    and would otherwise keep it (status.autoscaling.weights of a pod that is gone)."""
    current = current or {}
    out: dict[str, Any] = {}
    for key, value in patch.items():
        old = current.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            nested = merge_patch(value, old)
            nested.update({k: None for k in old if k not in value})
            out[key] = nested
        else:
            out[key] = value
    return out
