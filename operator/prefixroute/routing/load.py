"""The load view: what the router knows about each member's current work.

Two sources meet here. The router's own accounting (requests and prompt units it
has in flight to a member) is exact but sees only this router's traffic; an
engine's scraped metrics (waiting and running requests, KV usage) see every
router's traffic but are a scrape interval old. A member's load is the larger.

The bounded-load rule needs the fleet's total load on every decision; summing it
over the fleet each time would make a decision cost grow with the fleet, so the
tracker keeps the total over one set of names (the fleet's routable members, as
the strategies ask for it) up to date on every change instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class MemberLoad:
    in_flight: int = 0  # requests this router has open to the member
    in_flight_units: int = 0  # their prompt length (characters or tokens)
    engine_waiting: float = 0.0  # scraped vllm:num_requests_waiting
    engine_running: float = 0.0  # scraped vllm:num_requests_running
    kv_usage: float = 0.0  # scraped KV cache usage, 0..1
    # Uncached prompt units of this router's requests that have no first byte yet: the
    # prefill work queued ahead of a new request, which is what delays its first token.
    prefill_units: int = 0

    @property
    def requests(self) -> float:
        return max(float(self.in_flight), self.engine_waiting + self.engine_running)


_IDLE = MemberLoad()


class LoadTracker:
    """Mutable per-member load, updated by the router (or the simulator) as requests
    start and end. `view()` is what strategies read; it is the tracker itself."""

    def __init__(self) -> None:
        self._loads: dict[str, MemberLoad] = {}
        self._scope: frozenset[str] = frozenset()  # the names `_scope_total` sums over
        self._scope_total = 0.0

    def get(self, name: str) -> MemberLoad:
        return self._loads.get(name, _IDLE)

    def _entry(self, name: str) -> MemberLoad:
        load = self._loads.get(name)
        if load is None:
            load = self._loads[name] = MemberLoad()
        return load

    def total_requests(self, names: frozenset[str]) -> float:
        """The sum of `requests` over `names`: O(1) when asked for the same set as last time
        (a fleet's ring names, one object per fleet), O(len(names)) once per new set."""
        if names is not self._scope:
            self._scope = names
            self._scope_total = float(sum(self.get(n).requests for n in names))
        return self._scope_total

    def _changed(self, name: str, before: float, load: MemberLoad) -> None:
        if name in self._scope:
            self._scope_total += load.requests - before

    def begin(self, name: str, units: int, prefill: int | None = None) -> None:
        """A request of `units` prompt units went to `name`; `prefill` of them are not
        expected to be cached there (all of them when the caller cannot tell)."""
        load = self._loads.get(name)
        if load is None:
            load = self._loads[name] = MemberLoad()
        before = load.requests
        load.in_flight += 1
        load.in_flight_units += units
        load.prefill_units += units if prefill is None else prefill
        if name in self._scope:  # `_changed`, inline: begin and end run on every request
            self._scope_total += load.requests - before

    def first_byte(self, name: str, prefill: int) -> None:
        """The request's first byte arrived: its prefill (as given to `begin`) is done."""
        load = self._entry(name)
        load.prefill_units = max(0, load.prefill_units - prefill)

    def end(self, name: str, units: int, prefill: int | None = None) -> None:
        """The request finished. `prefill` is the part still counted as pending: 0 after
        `first_byte`, else what `begin` was given (default: all its units)."""
        load = self._loads.get(name)
        if load is None:
            load = self._loads[name] = MemberLoad()
        before = load.requests
        load.in_flight = max(0, load.in_flight - 1)
        load.in_flight_units = max(0, load.in_flight_units - units)
        load.prefill_units = max(0, load.prefill_units - (units if prefill is None else prefill))
        if name in self._scope:
            self._scope_total += load.requests - before

    def report_engine(self, name: str, waiting: float, running: float, kv_usage: float) -> None:
        load = self._entry(name)
        before = load.requests
        load.engine_waiting, load.engine_running, load.kv_usage = waiting, running, kv_usage
        self._changed(name, before, load)

    def forget(self, name: str) -> None:
        load = self._loads.pop(name, None)
        if load is not None and name in self._scope:
            self._scope_total -= load.requests

    def snapshot(self) -> Mapping[str, MemberLoad]:
        return dict(self._loads)

    def imbalance(self, names: list[str]) -> float:
        """max/mean of requests in flight over `names` (1.0 = perfectly even; 1.0 when idle)."""
        if not names:
            return 1.0
        values = [self.get(n).requests for n in names]
        mean = sum(values) / len(values)
        return max(values) / mean if mean > 0 else 1.0
