"""Whether the API server refuses a model's pods, from its Deployments' own word (pure).

The operator creates Deployments; their ReplicaSets create the pods. When the API server
refuses a pod (Pod Security admission, a ResourceQuota, a LimitRange, an admission webhook),
nothing fails where the operator looks: the pods simply never appear, the engines never get
ready, and a per-node model cache stays "Downloading". The ReplicaSet controller records the
refusal as its ReplicaFailure condition (reason FailedCreate, the API server's own words) and
the Deployment controller copies it onto the Deployment, which the operator watches anyway.

While any of a model's Deployments carries ReplicaFailure, the model is Degraded, reason
PodsRefused, with the Deployment's name and the API server's message; once every one has
dropped it, the condition clears. A problem with the spec or its objects (InvalidSpec,
ApplyFailed, ...), the API-key Secret or the routers' tokenizer is reported first: this one
never replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefixroute.controller.conditions import DEGRADED, condition, find, reported_degraded

REASON = "PodsRefused"
_MESSAGE_LIMIT = 600  # per Deployment: a webhook's answer can be long; the Deployment keeps it whole


def refusal(deployment: Mapping[str, Any]) -> str | None:
    """The API server's reason for refusing this Deployment's pods, or None while it refuses none."""
    conditions = (deployment.get("status") or {}).get("conditions")
    failure = find(conditions, "ReplicaFailure")
    if failure is None or failure.get("status") != "True":
        return None
    message = str(failure.get("message") or failure.get("reason") or "ReplicaFailure")
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."


def problem(refusals: Mapping[str, str]) -> str | None:
    """One message for every Deployment whose pods are refused, or None when none is."""
    if not refusals:
        return None
    parts = "; ".join(f"Deployment {name}: {message}" for name, message in sorted(refusals.items()))
    return (
        f"the API server refuses to create pods: {parts} (the namespace's Pod Security level, a "
        "ResourceQuota or an admission policy; the Deployment controller keeps trying, so fixing "
        "the cause is enough)"
    )


def degraded_for(problem: str | None, previous: Mapping[str, Any] | None, generation: int) -> dict[str, Any] | None:
    """The Degraded condition the Deployments ask for: PodsRefused while there is a problem,
    back to Reconciled once one that was reported is gone; None: leave it as is."""
    return reported_degraded(REASON, problem, previous, generation, "the API server creates the model's pods again")


def kept(refused: str | None, generation: int) -> dict[str, Any] | None:
    """For a reconcile: PodsRefused while the Deployments still refuse pods (``refused``: the
    problem as the operator last saw them), None otherwise."""
    return None if refused is None else condition(DEGRADED, True, REASON, refused, generation)
