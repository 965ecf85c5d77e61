"""Status conditions, the Kubernetes way (pure; kopf has no helper for them).

A condition's lastTransitionTime changes only when its status changes, never when only
its reason or message does — so `kubectl wait` and dashboards see real transitions. The
clock is passed in. Conditions of other types (e.g. the autoscaler's) are kept as found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
READY, PROGRESSING, DEGRADED = "Ready", "Progressing", "Degraded"
ORDER = (READY, PROGRESSING, DEGRADED)


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server stores metav1.Time."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str, status: bool | str, reason: str, message: str, observed_generation: int | None = None
) -> dict[str, Any]:
    """A condition without its transition time (``merge_conditions`` sets that)."""
    text = (TRUE if status else FALSE) if isinstance(status, bool) else status
    found: dict[str, Any] = {"type": type_, "status": text, "reason": reason, "message": message}
    if observed_generation is not None:
        found["observedGeneration"] = observed_generation
    return found


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for item in conditions or ():
        if item.get("type") == type_:
            return item
    return None


def merge_conditions(
    existing: Sequence[Mapping[str, Any]] | None, updates: Iterable[Mapping[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """The condition list after ``updates``: ours in a fixed order, then others as found."""
    by_type: dict[str, dict[str, Any]] = {str(c.get("type")): dict(c) for c in existing or ()}
    for update in updates:
        old = by_type.get(update["type"])
        changed = old is None or old.get("status") != update["status"] or not old.get("lastTransitionTime")
        stamp = timestamp(now) if changed else old["lastTransitionTime"]  # type: ignore[index]
        by_type[update["type"]] = {**update, "lastTransitionTime": stamp}
    ours = [by_type.pop(t) for t in ORDER if t in by_type]
    return ours + [by_type[t] for t in sorted(by_type)]


def raised(status: Mapping[str, Any] | None, reason: str) -> Mapping[str, Any] | None:
    """The Degraded condition of ``status`` while it is True for ``reason``, else None."""
    old = find(status.get("conditions") if status else None, DEGRADED)
    return old if old is not None and old.get("reason") == reason and old.get("status") == TRUE else None


def reported_degraded(
    reason: str, problem: str | None, previous: Mapping[str, Any] | None, generation: int, cleared: str
) -> dict[str, Any] | None:
    """Degraded for a problem that one watcher reports (the routers' tokenizer, refused pods):
    True ``reason`` while there is ``problem``, back to Reconciled (``cleared``) once one it
    raised is gone; None: leave the condition as it is — also while it is True for another
    reason, which is reported first."""
    old = find(previous.get("conditions") if previous else None, DEGRADED)
    if old is not None and old.get("status") == TRUE:
        if old.get("reason") != reason:
            return None
        if problem is None:  # ours, and gone
            return condition(DEGRADED, False, "Reconciled", cleared, generation)
    if problem is not None:
        return condition(DEGRADED, True, reason, problem, generation)
    return None
