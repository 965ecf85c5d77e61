"""What a front saw over the last minute, for a status column rather than a dashboard.

Prometheus keeps histories; a ``kubectl get`` column needs one number now, and not every
cluster runs Prometheus. So a front keeps the figures of its last ``seconds`` itself and
exports them as gauges (``prefixroute_router_recent_*``), which the operator reads from the
routers to fill the Hit rate and TTFT p50 columns when its autoscaler does not:

- the median time to first byte relayed (for a stream, the engine's time to first token
  plus the hop; for a whole answer, the answer);
- the prefix cache hit rate: the engines' own (prompt tokens found in their cache over
  tokens looked up, from their counters as the front scrapes them, ``--scrape-interval``),
  else the front's estimate (the mean share of a prompt's blocks the chosen member was
  believed to hold; only prefix-cache keeps the index that makes one);
- how many requests that minute held (to weigh several routers).

Bounded: at most ``cap`` values are kept; everything runs on the event loop's thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

WINDOW_SECONDS = 60.0
CAP = 8192


class RecentValues:
    """Values of the last ``seconds`` (the newest ``cap`` of them)."""

    def __init__(
        self, seconds: float = WINDOW_SECONDS, cap: int = CAP, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds, self.clock = seconds, clock
        self._values: deque[tuple[float, float]] = deque(maxlen=cap)

    def add(self, value: float) -> None:
        self._values.append((self.clock(), value))

    def values(self) -> list[float]:
        horizon = self.clock() - self.seconds
        while self._values and self._values[0][0] < horizon:
            self._values.popleft()
        return [v for _, v in self._values]

    def median(self) -> float | None:
        values = sorted(self.values())
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def mean(self) -> float | None:
        values = self.values()
        return sum(values) / len(values) if values else None


class RecentCounters:
    """Each engine's cumulative prefix-cache counters as scraped: the hit rate of the window.

    Per member, the oldest reading within the window and the newest; a counter that went
    down (the engine restarted) starts the member's history again."""

    def __init__(self, seconds: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self._history: dict[str, deque[tuple[float, float, float]]] = {}

    def report(self, member: str, hits: float, queries: float) -> None:
        now = self.clock()
        history = self._history.setdefault(member, deque())
        if history and (hits < history[-1][1] or queries < history[-1][2]):
            history.clear()
        history.append((now, hits, queries))
        while history and history[0][0] < now - self.seconds:
            history.popleft()

    def forget(self, members: Iterable[str]) -> None:
        for member in members:
            self._history.pop(member, None)

    def hit_rate(self) -> float | None:
        horizon = self.clock() - self.seconds
        hits = queries = 0.0
        for history in self._history.values():
            inside = [reading for reading in history if reading[0] >= horizon]
            if len(inside) > 1:
                hits += inside[-1][1] - inside[0][1]
                queries += inside[-1][2] - inside[0][2]
        return hits / queries if queries > 0 else None
