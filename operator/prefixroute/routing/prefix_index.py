"""Which block keys each member holds: a global map from key to holders, over one LRU per member.

The router cannot see an engine's cache, so it keeps a belief. Two feeds write
the same index: approximate (`record`: this router sent these blocks there) and
precise (`record` for what an engine reports stored, `remove` for what it
evicted, `forget` when its cache is cleared or it left).

Two views of one set of facts, kept equal on every change:

- per member, an LRU of the keys it holds, capped (`capacity_per_member`): an
  engine forgets its least recently used blocks first, and so does the belief.
  Memory is bounded by members x cap;
- per key, the members holding it (`_holders`). A lookup walks a request's keys
  from the deepest and meets only members that hold some of them, so the cost of
  a routing decision does not grow with the fleet (`matches`).

A key held by one member maps to that member's name; by several, to a set of
names. Most keys (a conversation's own history) live on one member, so this
saves a set per key at fleet scale.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence


def leading_held(held: OrderedDict[int, None] | dict[int, None], blocks: Sequence[int]) -> int:
    """How many leading keys of `blocks` are in `held` (the scan stops at the first miss,
    as an engine's prefix lookup does: keys are chained, so a hit at i means keys 0..i match)."""
    count = 0
    for block in blocks:
        if block not in held:
            break
        count += 1
    return count


class MemberIndex:
    """The keys one member holds, least recently used first (an engine's own LRU has this shape
    too: engine_model.kv_cache reuses it as the simulated engine's cache)."""

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

    def __iter__(self) -> Iterator[int]:
        return iter(self._blocks)

    def matched(self, blocks: Sequence[int]) -> int:
        """How many leading blocks of `blocks` this member holds."""
        return leading_held(self._blocks, blocks)

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


Holders = str | set[str]


class PrefixIndex:
    """Block key -> members holding it, over a capped LRU per member."""

    def __init__(self, capacity_per_member: int) -> None:
        if capacity_per_member <= 0:
            raise ValueError("capacity must be positive")
        self.capacity_per_member = capacity_per_member
        self._members: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, Holders] = {}

    # -- changes ----------------------------------------------------------------------

    def record(self, member: str, blocks: Sequence[int]) -> None:
        """`member` holds `blocks` now, as its most recently used (approximate: we sent them
        there; precise: its engine stored them). Beyond the cap its least recent go."""
        held = self._members.get(member)
        if held is None:
            if not blocks:
                return
            held = self._members[member] = OrderedDict()
        holders = self._holders
        for block in blocks:
            if block in held:
                held.move_to_end(block)
                continue
            held[block] = None
            current = holders.get(block)
            if current is None:
                holders[block] = member
            elif isinstance(current, str):
                holders[block] = {current, member}
            else:
                current.add(member)
        while len(held) > self.capacity_per_member:
            self._drop_holder(held.popitem(last=False)[0], member)

    def remove(self, member: str, blocks: Sequence[int]) -> None:
        """`member` no longer holds `blocks` (precise: its engine evicted them)."""
        held = self._members.get(member)
        if held is None:
            return
        for block in blocks:
            if block in held:
                del held[block]
                self._drop_holder(block, member)
        if not held:
            del self._members[member]

    def forget(self, member: str) -> None:
        """`member` holds nothing any more (it left, restarted or cleared its cache)."""
        held = self._members.pop(member, None)
        if held is None:
            return
        for block in held:
            self._drop_holder(block, member)

    def _drop_holder(self, block: int, member: str) -> None:
        current = self._holders.get(block)
        if current is None:
            return
        if isinstance(current, str):
            if current == member:
                del self._holders[block]
            return
        current.discard(member)
        if len(current) == 1:
            self._holders[block] = next(iter(current))
        elif not current:
            del self._holders[block]

    # -- lookups ----------------------------------------------------------------------

    def matched(self, member: str, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` that `member` holds."""
        held = self._members.get(member)
        return leading_held(held, blocks) if held is not None else 0

    def holders(self, block: int) -> frozenset[str]:
        """The members holding `block`."""
        current = self._holders.get(block)
        if current is None:
            return frozenset()
        return frozenset((current,)) if isinstance(current, str) else frozenset(current)

    def matches(self, blocks: Sequence[int], limit: int | None = None) -> dict[str, int]:
        """{member: leading blocks of `blocks` it holds} for the members holding the deepest
        of them — only those are looked at, never the whole fleet.

        The walk goes from the last key to the first and takes each key's holders whole.
        With `limit`, it stops before a key whose holders would bring the count over
        `limit`: a prefix that more members hold than that is one nearly everyone
        shares, and holding it tells members apart no better than load does (the
        caller scores a few members by load instead). Members that hold some key but
        not every key before it (an LRU can drop a prefix before its tail) get their
        true, shorter match; those that match nothing are left out. The dict's order
        carries no meaning (sets of names iterate in a per-process order)."""
        holders = self._holders
        found: dict[str, int] = {}
        cap = len(self._members) if limit is None else limit
        for depth in range(len(blocks), 0, -1):
            current = holders.get(blocks[depth - 1])
            if current is None:
                continue
            if isinstance(current, str):
                if current in found:
                    continue
                if len(found) + 1 > cap:
                    break
                fresh: Sequence[str] = (current,)
            else:
                if len(current) > cap:
                    break
                fresh = [m for m in current if m not in found]
                if len(found) + len(fresh) > cap:
                    break
            for member in fresh:
                # It holds none of the keys past `depth` (the walk met them first), so the
                # scan from the start ends by `depth`.
                matched = leading_held(self._members[member], blocks)
                if matched:
                    found[member] = matched
        return found

    # -- size -------------------------------------------------------------------------

    def size(self, member: str | None = None) -> int:
        """Blocks held for one member, or for all of them."""
        if member is not None:
            held = self._members.get(member)
            return len(held) if held is not None else 0
        return sum(len(held) for held in self._members.values())

    def sizes(self) -> dict[str, int]:
        """Blocks held per member (what the per-member cap bounds)."""
        return {member: len(held) for member, held in self._members.items()}

    def members(self) -> list[str]:
        return list(self._members)

    def distinct_blocks(self) -> int:
        """Distinct keys held by any member (entries of the global map)."""
        return len(self._holders)

    def check(self) -> None:
        """Raise AssertionError unless the global map equals a recount of the per-member LRUs
        and no LRU is over its cap (the invariant every change keeps; tests call it)."""
        recount: dict[int, set[str]] = {}
        for member, held in self._members.items():
            assert 0 < len(held) <= self.capacity_per_member, f"{member} holds {len(held)} blocks"
            for block in held:
                recount.setdefault(block, set()).add(member)
        stored = {b: {h} if isinstance(h, str) else set(h) for b, h in self._holders.items()}
        assert stored == recount, "the key -> holders map disagrees with the members' LRUs"
        assert all(isinstance(h, str) or len(h) >= 2 for h in self._holders.values()), "a set of fewer than 2"
