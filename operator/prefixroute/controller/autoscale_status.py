"""What the autoscaler writes and says about a decision (pure): status.autoscaling, the
MetricsAvailable condition, the printer columns, the Events — and how its memory is
rebuilt from status after an operator restart.

status.autoscaling (the CRD keeps unknown fields there):

- ``dryRun``, ``lastDecision`` (hold, scale-up, scale-down, drain, rebalance), ``reason``
  (the policy's explanation, with its numbers), ``lastEvaluationTime`` (the evaluation that
  last changed any of these: one that changes nothing keeps the previous time, so a quiet
  fleet's ticks write nothing — at a thousand models a write per tick would be 4,000 status
  patches a minute, each an event to every watcher of the model), ``lastScaleTime``;
- acting: ``desiredReplicas`` (what ``engine_replicas`` renders into the engine
  Deployment), ``weights`` (ring weight by pod, only those not 1: slow start, rebalance,
  0 while draining), ``draining`` ({pod, since}) and ``rebalanced`` ({pod: weight}), the
  last two so that a restarted operator resumes a drain and keeps a cooled hot spot cool;
- dry run: ``recommendedReplicas`` and ``recommendedWeights`` instead, which nothing reads.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prefixroute.autoscaling.policy import DRAIN, HOLD, REBALANCE, SCALE_DOWN, SCALE_UP, Decision, Draining, PolicyState
from prefixroute.autoscaling.signals import FleetSignals
from prefixroute.controller.conditions import condition, timestamp

METRICS_AVAILABLE = "MetricsAvailable"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
DRAIN_DELETION_COST = "-1000"  # below the default 0 of every other pod: the ReplicaSet deletes this one
EVENT_REASONS = {SCALE_UP: "ScaledUp", SCALE_DOWN: "ScaledDown", DRAIN: "Draining", REBALANCE: "Rebalanced"}
RECOMMENDED = "ScaleRecommended"
RESTORED = "Restored"
NOT_VERIFIED = "PrometheusNotVerified"
WARNING_NOTES = frozenset({"AtMaxReplicas"})


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp from status as seconds since the epoch (None if unreadable)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def at(seconds: float) -> str:
    return timestamp(datetime.fromtimestamp(seconds, UTC))


def _weights(weights: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(weights.items()) if v != 1.0}


def _unless_unchanged(previous: Mapping[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the previous lastEvaluationTime when nothing else in it moved."""
    stamp = "lastEvaluationTime"
    if stamp in previous and {k: v for k, v in doc.items() if k != stamp} == {
        k: v for k, v in previous.items() if k != stamp
    }:
        doc[stamp] = previous[stamp]
    return doc


def decision_status(
    previous: Mapping[str, Any], decision: Decision, state: PolicyState, *, dry_run: bool, now: float
) -> dict[str, Any]:
    """status.autoscaling after a decision (``state`` is the policy's state after it)."""
    doc: dict[str, Any] = {
        "dryRun": dry_run,
        "lastDecision": decision.action,
        "reason": decision.reason,
        "lastEvaluationTime": at(now),
    }
    last_scale = at(now) if decision.changes_replicas else previous.get("lastScaleTime")
    if last_scale:
        doc["lastScaleTime"] = last_scale
    if dry_run:
        doc["recommendedReplicas"] = decision.replicas
        doc["recommendedWeights"] = _weights(decision.weights)
        return _unless_unchanged(previous, doc)
    doc["desiredReplicas"] = decision.replicas
    doc["weights"] = _weights(decision.weights)
    if state.draining is not None:
        doc["draining"] = {"pod": state.draining.member, "since": at(state.draining.since)}
    rebalanced = {k: v for k, v in sorted(state.rebalance_weights.items()) if 0.0 < v < 1.0}
    if rebalanced:
        doc["rebalanced"] = rebalanced
    return _unless_unchanged(previous, doc)


def holding_status(
    previous: Mapping[str, Any], replicas: int, why: str, *, dry_run: bool, now: float
) -> dict[str, Any]:
    """status.autoscaling while signals are unavailable: everything as it was (replicas,
    weights, a drain in progress); the reason says why nothing moves."""
    doc = dict(previous)
    doc.update(
        {
            "dryRun": dry_run,
            "lastDecision": HOLD,
            "reason": f"holding {replicas} replicas: {why}",
            "lastEvaluationTime": at(now),
        }
    )
    if not dry_run:
        doc.setdefault("desiredReplicas", replicas)
    return _unless_unchanged(previous, doc)


def metrics_condition(available: bool | str, reason: str, message: str) -> dict[str, Any]:
    """True, False, or "Unknown" while the fleet starts (no engine ready or scraped yet)."""
    return condition(METRICS_AVAILABLE, available, reason, message)


def printer_columns(signals: FleetSignals) -> dict[str, Any]:
    """status.hitRate and status.ttftP50: the CRD's "Hit rate" and "TTFT p50" columns are
    numbers (float), so they are numbers here too, rounded to what a column shows; a
    value nobody can know (no traffic in the window) is removed rather than left stale."""

    def rounded(value: float | None) -> float | None:
        return None if value is None or not math.isfinite(value) else round(value, 3)

    return {"hitRate": rounded(signals.hit_rate), "ttftP50": rounded(signals.ttft_p50)}


def decision_event(decision: Decision, *, dry_run: bool) -> Event | None:
    """The Event a decision deserves: every one that is not a plain hold. In dry run the
    actions are recommendations (ScaleRecommended) and nothing has happened."""
    if decision.action != HOLD:
        if dry_run:
            return Event("Normal", RECOMMENDED, f"dry run, not applied: {decision.action}: {decision.reason}")
        # a scale to or from zero says so in its reason (ScaledToZero, ScaledFromZero)
        return Event("Normal", decision.note or EVENT_REASONS[decision.action], decision.reason)
    if decision.note:
        kind = "Warning" if decision.note in WARNING_NOTES else "Normal"
        return Event(kind, decision.note, ("dry run: " if dry_run else "") + decision.reason)
    return None


def not_verified_event(url: str) -> Event:
    """spec.autoscaling.prometheusTLS.insecureSkipVerify took effect: said once per change
    (and once after an operator restart), not at every tick."""
    return Event(
        "Warning",
        NOT_VERIFIED,
        f"the certificate of Prometheus at {url} is not verified (spec.autoscaling.prometheusTLS.insecureSkipVerify): "
        "whoever can intercept the connection can feed the autoscaler false metrics; name its CA in "
        "prometheusTLS.ca instead",
    )


def restored_event(pod: str, replicas: int) -> Event:
    """A drained pod survived its scale-down (the ReplicaSet deleted another, not-ready pod):
    it serves again, at full weight and without its low deletion cost."""
    return Event(
        "Normal",
        RESTORED,
        f"{pod} stayed when replicas went down to {replicas} (the ReplicaSet removed another pod); "
        "ring weight 0→1, deletion cost removed",
    )


def restored_state(autoscaling: Mapping[str, Any] | None, present: Collection[str]) -> PolicyState:
    """The policy's memory after an operator restart. Sample windows, cooldowns and
    slow-start ramps start afresh (no scaling until a window has been watched again); a
    drain in progress and the weights of rebalanced hot spots are taken back from status
    when their pods still exist."""
    doc = autoscaling or {}
    if doc.get("dryRun"):
        return PolicyState()
    draining = None
    entry = doc.get("draining")
    if isinstance(entry, Mapping) and entry.get("pod") in present:
        since = parse_time(entry.get("since"))
        if since is not None:
            draining = Draining(str(entry["pod"]), since)
    rebalanced: dict[str, float] = {}
    for pod, weight in (doc.get("rebalanced") or {}).items() if isinstance(doc.get("rebalanced"), Mapping) else ():
        if pod in present and isinstance(weight, (int, float)) and not isinstance(weight, bool) and 0 < weight < 1:
            rebalanced[str(pod)] = float(weight)
    return PolicyState(draining=draining, rebalance_weights=rebalanced)
