"""Which block hashes each member probably holds, learned from routing history.

One LRU per member, capped in blocks: the router cannot see an engine's cache,
so it remembers what it sent where and forgets the oldest first, which is how
the engine's own LRU forgets too. Memory is bounded by members x cap.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class MemberIndex:
    """The blocks one member is believed to hold, least recently used first."""

    __slots__ = ("capacity", "_blocks")

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def matched(self, blocks: Sequence[int]) -> int:
        """How many leading blocks of `blocks` this member holds.

        Hashes are chained, so a hit at i means blocks 0..i are equal; the scan
        stops at the first miss like an engine's prefix lookup does.
        """
        held = self._blocks
        count = 0
        for block in blocks:
            if block not in held:
                break
            count += 1
        return count

    def record(self, blocks: Sequence[int]) -> None:
        """The member has just been sent these blocks: they are now its most recent."""
        held = self._blocks
        for block in blocks:
            if block in held:
                held.move_to_end(block)
            else:
                held[block] = None
        while len(held) > self.capacity:
            held.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()


class PrefixIndex:
    """A `MemberIndex` per member name."""

    def __init__(self, capacity_per_member: int) -> None:
        self.capacity_per_member = capacity_per_member
        self._members: dict[str, MemberIndex] = {}

    def matched(self, member: str, blocks: Sequence[int]) -> int:
        index = self._members.get(member)
        return index.matched(blocks) if index is not None else 0

    def record(self, member: str, blocks: Sequence[int]) -> None:
        index = self._members.get(member)
        if index is None:
            index = self._members[member] = MemberIndex(self.capacity_per_member)
        index.record(blocks)

    def forget(self, member: str) -> None:
        self._members.pop(member, None)

    def size(self, member: str | None = None) -> int:
        """Blocks held for one member, or for all of them."""
        if member is not None:
            index = self._members.get(member)
            return len(index) if index is not None else 0
        return sum(len(i) for i in self._members.values())

    def members(self) -> list[str]:
        return list(self._members)
