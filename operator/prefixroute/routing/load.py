"""The load view: what the router knows about each member's current work.

Three sources meet here. The router's own accounting (requests and prompt units it
has in flight to a member) is exact but sees only this router's traffic; its peers'
accounting (the other router replicas', as they publish it: `routing.peers`) adds
theirs, a publication late; an engine's scraped metrics (waiting and running
requests, KV usage) see every router's traffic but are a scrape interval old. A
member's load is the larger of the routers' sum and the engine's figure.

The bounded-load rule needs the fleet's total load on every decision; summing it
over the fleet each time would make a decision cost grow with the fleet, so the
tracker keeps the total over one set of names (the fleet's routable members, as
the strategies ask for it) up to date on every change instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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
    # The same three figures summed over the peers (other router replicas) that report them.
    peer_in_flight: int = 0
    peer_units: int = 0
    peer_prefill: int = 0

    @property
    def requests(self) -> float:
        # max() written out: a plain request reads this six times (begin, end, two bound checks),
        # and each max() is a builtin call. Same result: the routers' figure unless the engine's
        # is larger (a NaN engine figure loses, as it does in max()).
        routers = float(self.in_flight + self.peer_in_flight)
        engine = self.engine_waiting + self.engine_running
        return engine if engine > routers else routers

    @property
    def units(self) -> int:
        """Prompt units in flight to the member from every router this one hears of."""
        return self.in_flight_units + self.peer_units

    @property
    def queued_prefill(self) -> int:
        """Prefill queued at the member by every router this one hears of (its own and its peers')."""
        return self.prefill_units + self.peer_prefill


_IDLE = MemberLoad()


class LoadTracker:
    """Mutable per-member load, updated by the router (or the simulator) as requests
    start and end. `view()` is what strategies read; it is the tracker itself."""

    def __init__(self) -> None:
        self._loads: dict[str, MemberLoad] = {}
        self._scope: frozenset[str] = frozenset()  # the names `_scope_total` sums over
        self._scope_total = 0.0
        # Changes to this router's own figures so far: a publisher to peers compares it with
        # the count at its last report to tell whether there is anything new to say, and
        # `on_change` (when set) hears of each as it happens, so a report can leave at once.
        self.changes = 0
        self.on_change: Callable[[], None] | None = None
        # Requests of doubt a member counted with peers' requests is given at its load bound
        # (`strategy.LoadBounds.fits`): peers' reports are late. 0 where they arrive at once
        # (the simulator without delay): the replicas then decide as one router.
        self.peer_doubt = 1

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
        self.changes += 1
        if self.on_change is not None:
            self.on_change()
        if name in self._scope:  # `_changed`, inline: begin and end run on every request
            self._scope_total += load.requests - before

    def first_byte(self, name: str, prefill: int) -> None:
        """The request's first byte arrived: its prefill (as given to `begin`) is done."""
        load = self._entry(name)
        left = load.prefill_units - prefill
        load.prefill_units = left if left > 0 else 0  # max(0, left) without its call: on every request
        self.changes += 1
        if self.on_change is not None:
            self.on_change()

    def end(self, name: str, units: int, prefill: int | None = None) -> None:
        """The request finished. `prefill` is the part still counted as pending: 0 after
        `first_byte`, else what `begin` was given (default: all its units)."""
        load = self._loads.get(name)
        if load is None:
            load = self._loads[name] = MemberLoad()
        before = load.requests
        # Each clamped at 0 (max(0, x) written out: three builtin calls saved on every request).
        in_flight = load.in_flight - 1
        load.in_flight = in_flight if in_flight > 0 else 0
        in_flight_units = load.in_flight_units - units
        load.in_flight_units = in_flight_units if in_flight_units > 0 else 0
        prefill_units = load.prefill_units - (units if prefill is None else prefill)
        load.prefill_units = prefill_units if prefill_units > 0 else 0
        self.changes += 1
        if self.on_change is not None:
            self.on_change()
        if name in self._scope:
            self._scope_total += load.requests - before

    def report_engine(self, name: str, waiting: float, running: float, kv_usage: float) -> None:
        load = self._entry(name)
        before = load.requests
        load.engine_waiting, load.engine_running, load.kv_usage = waiting, running, kv_usage
        self._changed(name, before, load)

    def set_peers(self, name: str, in_flight: int, units: int, prefill: int) -> None:
        """What the peers (other router replicas) have in flight to `name` now, summed over them."""
        load = self._loads.get(name)
        if load is None:
            if not (in_flight or units or prefill):
                return
            load = self._loads[name] = MemberLoad()
        before = load.requests
        load.peer_in_flight, load.peer_units, load.peer_prefill = in_flight, units, prefill
        self._changed(name, before, load)
        if not (in_flight or units or prefill) and load == _IDLE:
            del self._loads[name]  # nothing left to say about it (a member that left stays gone)

    def own(self) -> Iterator[tuple[str, int, int, int]]:
        """(member, requests, prompt units, prefill units) this router has in flight, for each
        member where any is not zero: what it tells its peers."""
        for name, load in self._loads.items():
            if load.in_flight or load.in_flight_units or load.prefill_units:
                yield name, load.in_flight, load.in_flight_units, load.prefill_units

    def forget(self, name: str) -> None:
        """Drop what this router and the engine's scrape say of `name` (it left the fleet);
        what peers still have in flight there stays counted until they say otherwise."""
        load = self._loads.pop(name, None)
        if load is None:
            return
        if load.peer_in_flight or load.peer_units or load.peer_prefill:
            kept = self._loads[name] = MemberLoad(
                peer_in_flight=load.peer_in_flight, peer_units=load.peer_units, peer_prefill=load.peer_prefill
            )
            self._changed(name, load.requests, kept)
        elif name in self._scope:
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
