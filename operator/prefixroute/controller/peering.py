"""Whether this operator replica may act, by kopf's peering rule (pure).

The models loop (``models_loop``) runs beside kopf, not inside one of its handlers, so kopf's
pause does not stop it by itself; it reads the same peering object kopf keeps (status: one
entry per replica, ``{priority, lifetime, lastseen}``) and applies kopf's rule: a live peer
of higher priority pauses this replica, and so does a live peer of the same priority (kopf
then freezes every replica of that priority). A peer is live until ``lastseen + lifetime``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
CLUSTER_PLURAL, NAMESPACED_PLURAL = "clusterkopfpeerings", "kopfpeerings"


@dataclass(frozen=True)
class Peering:
    """This replica's part in peering: kopf's settings and the identity given to ``kopf.run``.
    ``name`` None is standalone (always active). Without ``mandatory`` (kopf's default peering,
    when neither --peering nor --standalone is given) a missing object means standalone."""

    identity: str
    name: str | None = None
    priority: int = 0
    clusterwide: bool = True
    mandatory: bool = True


def _lastseen(value: Any, now: datetime) -> datetime | None:
    """kopf's reading: a missing time is now (a peer that just appeared); unreadable is None."""
    if value is None:
        return now
    if not isinstance(value, str):
        return None
    try:
        seen = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return seen if seen.tzinfo is not None else seen.replace(tzinfo=UTC)


def active(peers: Mapping[str, Any] | None, me: Peering, now: datetime) -> bool:
    """kopf's verdict for this replica from the peering object's status (None: the object
    is missing, which pauses kopf too when peering is on)."""
    if me.name is None:
        return True
    if peers is None:
        return not me.mandatory
    for identity, info in peers.items():
        if identity == me.identity or not isinstance(info, Mapping):
            continue
        seen = _lastseen(info.get("lastseen"), now)
        lifetime = info.get("lifetime", 60)
        if seen is None or not isinstance(lifetime, (int, float)):
            continue
        if seen + timedelta(seconds=float(lifetime)) <= now:
            continue  # dead: kopf ignores it (and cleans it up)
        priority = info.get("priority", 0)
        if isinstance(priority, (int, float)) and priority >= me.priority:
            return False
    return True
