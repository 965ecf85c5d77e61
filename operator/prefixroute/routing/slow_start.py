"""Slow start: a replica that joins a warm fleet takes a small share of new requests at first.

Its prefix cache is empty, so every request it gets pays the whole prefill; at full weight
it would take its full share of the fleet's traffic at once, and queue. Its ring weight is
therefore scaled by ``age / seconds`` (at least ``MIN_FACTOR``) until it has been ready for
``seconds``, in tenths, so the ring changes at most ten times per new replica.

Only while some other member is warm: a fleet that is new as a whole (a model just created,
every pod replaced, a scale from zero) has nobody to hand the traffic to, and equal low
weights would route exactly as equal full ones.

The operator applies it when it publishes status.ring (``controller.ring_status``), whether
or not its autoscaler runs, and the autoscaling simulator applies it the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

DEFAULT_SECONDS = 60.0  # spec.engine.slowStartSeconds' default
MIN_FACTOR = 0.1
STEPS = 10  # tenths


def factor(age: float | None, seconds: float) -> float:
    """The weight factor of a member ``age`` seconds after it turned ready (1 when unknown,
    when slow start is off, or once the ramp is over)."""
    if age is None or seconds <= 0 or age >= seconds:
        return 1.0
    tenths = math.ceil(max(age, 0.0) / seconds * STEPS)
    return max(MIN_FACTOR, tenths / STEPS)


def ramped(weights: Mapping[str, float], ages: Mapping[str, float | None], seconds: float) -> dict[str, float]:
    """``weights`` (by member) with the members that are still new scaled down, while at least
    one member is warm. Members absent from ``ages``, or with age None, count as warm."""
    factors = {name: factor(ages.get(name), seconds) for name in weights}
    if not any(f == 1.0 for f in factors.values()):
        return dict(weights)
    return {name: round(weight * factors[name], 3) for name, weight in weights.items()}
