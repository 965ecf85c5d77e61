"""What prefix-cache believes each member holds: the engine's word where it has one.

Two sources, per member:

- approximate: what this router sent there (`PrefixIndex`, learned at routing time).
  Every router replica sees only its own share of the traffic, and an engine that
  evicts, restarts or resets is not seen at all;
- precise: what the engine's KV events say it stored and has not evicted since
  (a second `PrefixIndex`, fed `record` / `remove` / `forget` by the events). Every replica reads the same events, so every replica holds the
  same view. Events lag the routing decision (the engine stores blocks when the
  prefill starts, which may be after seconds in its queue, and the message travels), so a
  request in flight to a precise member also counts for it until it ends — this router's,
  and its peers' as they report them (routing.peers) — otherwise a burst of requests
  sharing a new prefix would scatter before the first one is announced.

A member is looked up precisely while its stream is trusted (`set_precise`, from
`kv_stream`), approximately otherwise; both indexes are kept all the time, so
either is ready when trust changes. Both are capped per member: the history at
`--index-blocks`, the events' view at `EVENTS_VIEW_FACTOR` times that. The events'
view must not drop a block the engine still holds: its size is bounded by the
engine's own cache (every eviction is reported), and its LRU order says nothing
about use — a prefix that is reused is never announced again, so the hottest
blocks are the oldest in it. Capped at the history's size (16,384 blocks of 16
tokens, under an H100 engine's 27,000) it dropped exactly those, and the full
Mooncake trace fell from 33% to 24% hits in simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prefixroute.routing import kv_native
from prefixroute.routing.prefix_index import PrefixIndex

if TYPE_CHECKING:
    from prefixroute_native import NativeIndex

EVENTS_VIEW_FACTOR = 8


def events_view_capacity(index_blocks_per_member: int) -> int:
    """The cap of the events' view (and of the engine-hash map) per member."""
    return index_blocks_per_member * EVENTS_VIEW_FACTOR


class CacheBeliefs:
    """The approximate and precise views, this router's requests in flight, and which view each member uses."""

    def __init__(self, capacity_per_member: int) -> None:
        self.approximate = PrefixIndex(capacity_per_member)
        # The events' view: compiled when it is built (kv_native), as every block any engine
        # stores or evicts updates it; the same behaviour either way.
        stored_capacity = events_view_capacity(capacity_per_member)
        self.stored: PrefixIndex | NativeIndex = kv_native.new_index(stored_capacity) or PrefixIndex(stored_capacity)
        # member -> block -> requests in flight holding it; plain dicts, not Counters: this runs
        # twice per request in every mode, and Counter.update/subtract cost three times as much
        self._in_flight: dict[str, dict[int, int]] = {}
        self._precise: set[str] = set()

    # -- lookups --------------------------------------------------------------

    def is_precise(self, member: str) -> bool:
        return member in self._precise

    def matches(self, blocks: Sequence[int], limit: int | None = None) -> dict[str, int]:
        """{member: leading blocks of `blocks` believed held} for the members holding the deepest
        of them (`PrefixIndex.matches`, asked of each view: at most `limit` from each), each
        member's figure from its own view."""
        found = self.approximate.matches(blocks, limit)
        precise = self._precise
        if not precise:
            return found
        # A precise member's figure is its events' (plus its requests in flight, which the
        # approximate view also holds, so it is met there too).
        met = [m for m in found if m in precise] + [m for m in self.stored.matches(blocks, limit) if m in precise]
        found = {m: n for m, n in found.items() if m not in precise}
        for member in met:
            if member not in found and (matched := self.matched(member, blocks)):
                found[member] = matched
        return found

    def matched(self, member: str, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` believed held by `member`."""
        if member not in self._precise:
            return self.approximate.matched(member, blocks)
        stored = self.stored.matched(member, blocks)
        flying = self._in_flight.get(member)
        if not flying:
            return stored
        ahead = 0
        for block in blocks:
            if block not in flying:
                break
            ahead += 1
        return max(stored, ahead)

    # -- routing --------------------------------------------------------------

    def routed(self, member: str, blocks: Sequence[int], held_prefix: int | None = None) -> None:
        """This router sent `blocks` to `member`; `held_prefix`: how many leading ones the
        decision found it holds (a hint for the approximate view, when that view decided)."""
        if member not in self._precise:
            # Only a precise member's lookups read the requests in flight; counting them for
            # every member cost two passes over every prompt per request (about 40 us for an
            # 8k-token prompt). A request routed before its member turned precise is not
            # counted, and its end takes away at most what another request also counted.
            self.approximate.record(member, blocks, held_prefix)
            return
        self.approximate.record(member, blocks)
        if blocks:
            flying = self._in_flight.get(member)
            if flying is None:
                flying = self._in_flight[member] = {}
            get = flying.get
            for block in blocks:
                flying[block] = get(block, 0) + 1

    def completed(self, member: str, blocks: Sequence[int]) -> None:
        flying = self._in_flight.get(member)
        if flying is None or not blocks:
            return
        get = flying.get
        for block in blocks:
            left = get(block, 0) - 1
            if left > 0:
                flying[block] = left
            else:
                flying.pop(block, None)
        if not flying:
            del self._in_flight[member]

    # -- events ---------------------------------------------------------------

    def blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        self.stored.record(member, keys)

    def blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        self.stored.remove(member, keys)

    def cache_cleared(self, member: str) -> None:
        self.stored.forget(member)

    def set_precise(self, member: str, precise: bool) -> None:
        if precise:
            self._precise.add(member)
        else:
            self._precise.discard(member)

    def native_bytes(self) -> int:
        """Heap bytes of the compiled events' view, which tracemalloc does not see (its estimate)."""
        stored = self.stored
        return 0 if isinstance(stored, PrefixIndex) else stored.heap_bytes()

    def forget(self, member: str) -> None:
        self.approximate.forget(member)
        self.stored.forget(member)
        self._in_flight.pop(member, None)
        self._precise.discard(member)

    # -- size -----------------------------------------------------------------

    def size(self, member: str) -> int:
        """Blocks believed held by `member`, from the view its lookups use: its events' while it
        is precise (the same figure on every router replica, so a choice that weighs it —
        where a miss goes — agrees across replicas), else this router's routing history."""
        if member in self._precise:
            return self.stored.size(member)
        return self.approximate.size(member)

    def sizes(self) -> dict[str, int]:
        """Blocks remembered per member, both views together (what the memory cap bounds)."""
        out: dict[str, int] = {}
        for member in self.approximate.members():
            out[member] = self.approximate.size(member)
        for member in self.stored.members():
            out[member] = out.get(member, 0) + self.stored.size(member)
        return out
