"""Whether the router pods could mount the API-key Secret, from the kubelet's own word (pure).

The operator never reads the key Secret (its RBAC lets it get a Secret by name only for a
model's Prometheus CA, and list none: docs/security.md), so it never looks at the Secret
itself. A kubelet that cannot mount a Secret volume keeps the
pod from starting and says why in a Warning Event on the pod, reason FailedMount, naming
the volume: `MountVolume.SetUp failed for volume "api-keys" : secret "acme-keys" not found`,
or `... : references non-existent secret key: keys.yaml`. The router pods' volume of the
key file has a name of its own (`API_KEYS_VOLUME`), so a recent FailedMount of that volume
on a router pod that is not ready is the truth the operator reports: Degraded, reason
AuthSecretMissing, with the kubelet's words — and no crash loop, since the router never
starts without its keys. When the Secret appears the kubelet mounts it, the pod becomes
ready, and the condition clears.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from prefixroute.controller.builders.router import API_KEYS_VOLUME
from prefixroute.controller.conditions import DEGRADED, condition, find
from prefixroute.controller.names import COMPONENT_ROUTER
from prefixroute.controller.ring_status import Pod, component, is_ready, terminating
from prefixroute.controller.spec.auth import AuthSpec

REASON = "AuthSecretMissing"
FRESH = timedelta(minutes=3)  # the kubelet retries a failed mount (and reports again) within about two minutes
RECHECK_SECONDS = 10.0  # how often the operator looks again while a router pod waits (models_loop)


def waiting_routers(pods: Iterable[Pod]) -> list[str]:
    """Router pods that exist, are not being deleted and are not ready."""
    return [
        str((p.get("metadata") or {}).get("name"))
        for p in pods
        if component(p) == COMPONENT_ROUTER and not terminating(p) and not is_ready(p)
    ]


def should_look(spec: Mapping[str, Any], pods: Iterable[Pod]) -> bool:
    """Whether a spec (as stored) with API keys has a router pod still waiting: worth asking
    for the kubelet's events."""
    auth = spec.get("auth") or {}
    return bool(isinstance(auth, Mapping) and auth.get("apiKeysSecret")) and bool(waiting_routers(pods))


def secret_problem(
    auth: AuthSpec, pods: Iterable[Pod], events: Sequence[Mapping[str, Any]], now: datetime
) -> str | None:
    """What keeps the router pods from their key file, or None. `events`: FailedMount events
    of the namespace as ``slim_event`` gives them."""
    if not auth.keys_on:
        return None
    waiting = set(waiting_routers(pods))
    volume = f'volume "{API_KEYS_VOLUME}"'
    found = [
        e
        for e in events
        if e.get("pod") in waiting
        and volume in str(e.get("message", ""))
        and isinstance(e.get("time"), datetime)
        and now - e["time"] <= FRESH
    ]
    if not found:
        return None
    latest = max(found, key=lambda e: e["time"])
    return (
        f"the router pods cannot mount Secret {auth.api_keys_secret!r} (key {auth.api_keys_key!r}) "
        f"named by spec.auth.apiKeysSecret; the kubelet says: {latest['message']}"
    )


def slim_event(involved: Mapping[str, Any], message: str | None, times: Sequence[datetime | None]) -> dict[str, Any]:
    """An event as `secret_problem` reads it: the pod it is about, its text, its latest time."""
    known = [t for t in times if t is not None]
    return {"pod": involved.get("name"), "message": message or "", "time": max(known) if known else None}


def degraded_for(problem: str | None, previous: Mapping[str, Any] | None, generation: int) -> dict[str, Any] | None:
    """The Degraded condition the Secret's state asks for: AuthSecretMissing while there is a
    problem; back to Reconciled once one that was reported is gone; None: leave it as is."""
    if problem is not None:
        return condition(DEGRADED, True, REASON, problem, generation)
    old = find(previous.get("conditions") if previous else None, DEGRADED)
    if old is not None and old.get("reason") == REASON:
        return condition(DEGRADED, False, "Reconciled", "the router pods mounted the API-key Secret", generation)
    return None
