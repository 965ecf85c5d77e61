"""Per-tenant limits (requests in flight, prompt units per minute) and the bad-key slowdown.

Every method takes `now` (seconds on any monotonic clock), so the router drives it with
its clock and tests with a fake one. A refusal carries the seconds after which the same
request would be accepted, for the 429's Retry-After.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from prefixroute.tenancy.keys import TenantLimits


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # "concurrency" or "tokens"
    message: str
    retry_after: float  # seconds


class _Bucket:
    """A token bucket holding at most one minute's allowance, refilled continuously."""

    __slots__ = ("at", "level")

    def __init__(self, level: float, at: float) -> None:
        self.level = level
        self.at = at


class TenantLimiter:
    """Admits or refuses a tenant's next request under its limits, and counts it while in flight."""

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def in_flight(self, tenant: str) -> int:
        return self._in_flight.get(tenant, 0)

    def check(self, tenant: str, limits: TenantLimits, units: int, now: float) -> Refusal | None:
        """None when the request may go (and it is then counted), else why not.

        A request larger than a whole minute's allowance is refused for good: no wait makes
        it fit, and the message says so."""
        busy = self._in_flight.get(tenant, 0)
        if limits.max_concurrent is not None and busy >= limits.max_concurrent:
            return Refusal(
                "concurrency",
                f"tenant {tenant!r} already has {busy} requests in flight; its limit is {limits.max_concurrent}",
                1.0,
            )
        per_minute = limits.tokens_per_minute
        if per_minute is not None:
            if units > per_minute:
                return Refusal(
                    "tokens",
                    f"the prompt is {units} units; tenant {tenant!r} may send {per_minute} per minute in all",
                    60.0,
                )
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = _Bucket(float(per_minute), now)
            rate = per_minute / 60.0
            bucket.level = min(float(per_minute), bucket.level + max(0.0, now - bucket.at) * rate)
            bucket.at = now
            if bucket.level < units:
                wait = (units - bucket.level) / rate
                return Refusal(
                    "tokens",
                    f"tenant {tenant!r} is over its {per_minute} prompt units per minute",
                    wait,
                )
            bucket.level -= units
        self._in_flight[tenant] = busy + 1
        return None

    def done(self, tenant: str) -> None:
        busy = self._in_flight.get(tenant, 0) - 1
        if busy > 0:
            self._in_flight[tenant] = busy
        else:
            self._in_flight.pop(tenant, None)


def retry_after_header(seconds: float) -> str:
    """Whole seconds, at least 1 (RFC 9110: delay-seconds is a non-negative integer)."""
    return str(max(1, math.ceil(seconds)))


class BadKeyThrottle:
    """Slows down a client that keeps presenting unknown keys: after `free` failures in
    `window` seconds, each further 401 waits twice as long as the last (up to `cap`).
    A success clears the client's record. Memory is bounded: the least recently seen
    clients are forgotten first."""

    def __init__(
        self, free: int = 5, window: float = 60.0, first_delay: float = 0.1, cap: float = 5.0, clients: int = 10_000
    ) -> None:
        self.free, self.window, self.first_delay, self.cap, self.clients = free, window, first_delay, cap, clients
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (failures, since)

    def failed(self, client: str, now: float) -> float:
        """Record a bad key from `client`; returns the seconds to wait before answering."""
        count, since = self._failures.pop(client, (0, now))
        if now - since > self.window:
            count, since = 0, now
        count += 1
        self._failures[client] = (count, since)
        while len(self._failures) > self.clients:
            self._failures.popitem(last=False)
        extra = count - self.free
        return 0.0 if extra <= 0 else min(self.cap, self.first_delay * 2 ** (extra - 1))

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)
