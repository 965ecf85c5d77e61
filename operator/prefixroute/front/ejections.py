"""Passive health: members that just failed are ejected for a while, then let back in.

A front learns that a member is down only from its traffic: the router from connection
refused or reset, or a 5xx before the first byte; the EPP from a 5xx the gateway reports. Ejection is timed and backs
off — 5 s, 10 s, 20 s ... up to a cap — per consecutive failure, and a success
after re-admission clears the count. Nothing here reads a clock: callers pass
`now`, so tests and the simulator drive time.

When every routable member is ejected, a front ignores ejections ("panic
mode", as Envoy calls it): trying a possibly-dead member beats refusing every
request while, say, the only engine has a hiccup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class _Record:
    failures: int = 0  # consecutive failures
    until: float = 0.0  # ejected until this time


class Ejections:
    def __init__(self, base_seconds: float, max_seconds: float) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max_seconds
        self._records: dict[str, _Record] = {}
        self._ejected: dict[str, float] = {}  # name -> until, only members still out (a fast empty check)

    def failed(self, name: str, now: float) -> float:
        """Record a failure of `name` and eject it; returns the ejection's length in seconds."""
        record = self._records.setdefault(name, _Record())
        record.failures += 1
        seconds = min(self.max_seconds, self.base_seconds * 2.0 ** (record.failures - 1))
        record.until = now + seconds
        self._ejected[name] = record.until
        return seconds

    def succeeded(self, name: str) -> None:
        """A request to `name` went through: its failure streak is over."""
        if name in self._records and name not in self._ejected:
            del self._records[name]

    def excluded(self, now: float) -> frozenset[str]:
        """Members still ejected at `now` (re-admits the others)."""
        ejected = self._ejected
        if not ejected:
            return frozenset()
        for name in [n for n, until in ejected.items() if until <= now]:
            del ejected[name]
        return frozenset(ejected)

    def next_readmission(self, now: float) -> float | None:
        """Seconds until the first ejected member comes back (None when none is out)."""
        times = [until for until in self._ejected.values() if until > now]
        return min(times) - now if times else None

    def forget(self, names: Iterable[str]) -> None:
        """Members that left the fleet: a member that comes back starts clean."""
        for name in names:
            self._records.pop(name, None)
            self._ejected.pop(name, None)
