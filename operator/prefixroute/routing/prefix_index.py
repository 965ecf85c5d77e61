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

A key held by one member maps to that member's name; by several, to a frozenset
of names, shared by consecutive keys of a prompt that have the same holders (an
update of a run of keys computes the new value once). Most keys (a
conversation's own history) live on one member, so a name saves a set per key
at fleet scale, and shared values keep a prefix held by the whole fleet at one
set, not one per key.
"""

from __future__ import annotations

import sys
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import compress, repeat, takewhile
from operator import is_

# Runs an iterator to its end inside C, keeping nothing: one empty deque's `extend`, not a new
# `deque(iterator, maxlen=0)` per call (whose keyword parsing alone cost more than the loop's setup).
_consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend
_is_none: Callable[[object], bool] = partial(is_, None)


def leading_held(held: OrderedDict[int, None] | dict[int, None], blocks: Sequence[int]) -> int:
    """How many leading keys of `blocks` are in `held` (the scan stops at the first miss,
    as an engine's prefix lookup does: keys are chained, so a hit at i means keys 0..i match).
    The scan runs inside itertools, not in a Python loop: it is on every decision's path."""
    return len(list(takewhile(held.__contains__, blocks)))


class MemberIndex:
    """The keys one member holds, least recently used first (an engine's own LRU has this shape
    too: engine_model.kv_cache reuses it as the simulated engine's cache)."""

    __slots__ = ("_blocks", "capacity")

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


Holders = str | frozenset[str]


class _Runs:
    """Holder values replaced during one change, old object -> new object.

    The keys of one prompt come in runs with the very same holders (a conversation's
    history on one member, a system prompt on many): a run shares one immutable holder
    value, so its update is computed once, and the lookup walk (`matches`) passes a
    whole run in one step."""

    __slots__ = ("new", "old")

    def __init__(self) -> None:
        self.old: Holders | None = None
        self.new: Holders | None = None


def _with(current: Holders | None, member: str) -> Holders:
    if current is None:
        return member
    if isinstance(current, str):
        return frozenset((current, member))
    return current | {member}


def _without(current: Holders, member: str) -> Holders | None:
    if isinstance(current, str):
        return None if current == member else current
    rest = current - {member}
    if len(rest) > 1:
        return rest
    return next(iter(rest)) if rest else None


class PrefixIndex:
    """Block key -> members holding it, over a capped LRU per member."""

    def __init__(self, capacity_per_member: int) -> None:
        if capacity_per_member <= 0:
            raise ValueError("capacity must be positive")
        self.capacity_per_member = capacity_per_member
        self._members: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, Holders] = {}

    # -- changes ----------------------------------------------------------------------

    def record(self, member: str, blocks: Sequence[int], held_prefix: int | None = None) -> None:
        """`member` holds `blocks` now, as its most recently used (approximate: we sent them
        there; precise: its engine stored them). Beyond the cap its least recent go.

        `held_prefix`: how many leading blocks the caller has just found `member` to hold
        (a routing decision knows it), which spares finding it again; a wrong figure is
        caught and costs only the search."""
        member = sys.intern(member)  # one object per name, so runs of keys share holder values
        held = self._members.get(member)
        if held is None:
            if not blocks:
                return
            held = self._members[member] = OrderedDict()
        # Usually most of the prompt is held already (the same conversation again): touch
        # that leading part without a Python loop, then go through the rest one by one.
        known = leading_held(held, blocks) if held_prefix is None else held_prefix
        whole = known >= len(blocks)  # all held: no slice to copy, nothing new to add
        try:
            _consume(map(held.move_to_end, blocks if whole else blocks[:known]))
        except KeyError:
            known = leading_held(held, blocks)
            whole = known == len(blocks)
            _consume(map(held.move_to_end, blocks[:known]))
        if whole:
            return  # the member's size did not change, so nothing is over the cap
        rest = blocks[known:] if known else blocks
        if held.keys().isdisjoint(rest):
            self._add_new(member, held, rest)
        else:
            self._add_some(member, held, rest)
        if len(held) > self.capacity_per_member:
            runs = _Runs()
            while len(held) > self.capacity_per_member:
                self._drop_holder(held.popitem(last=False)[0], member, runs)

    def _add_new(self, member: str, held: OrderedDict[int, None], blocks: Sequence[int]) -> None:
        """Blocks the member did not hold, added in C when they share one holder value (a run
        an engine stored is usually new to every member, or held by the same few): an engine's
        events add thousands of blocks a second per member, where a Python step per block cost
        as much as the rest of the event's way together."""
        holders = self._holders
        held.update(zip(blocks, repeat(None)))
        current = list(map(holders.get, blocks))
        if current.count(current[0]) == len(current):  # equal values: the same update for all
            holders.update(zip(blocks, repeat(_with(current[0], member))))
            return
        runs = _Runs()
        for block, value in zip(blocks, current):
            if value is not runs.old or runs.new is None:
                runs.old, runs.new = value, _with(value, member)
            holders[block] = runs.new

    def _add_some(self, member: str, held: OrderedDict[int, None], blocks: Sequence[int]) -> None:
        """Blocks of which the member holds some: those become its newest, the others are added."""
        holders = self._holders
        runs = _Runs()
        for block in blocks:
            if block in held:
                held.move_to_end(block)
                continue
            held[block] = None
            current = holders.get(block)
            if current is not runs.old or runs.new is None:
                runs.old, runs.new = current, _with(current, member)
            holders[block] = runs.new

    def remove(self, member: str, blocks: Sequence[int]) -> None:
        """`member` no longer holds `blocks` (precise: its engine evicted them)."""
        held = self._members.get(member)
        if held is None:
            return
        # Popped in C; a block held gives its value, None, and one not held (or already popped:
        # a list may name a block twice) the default, False.
        present = list(compress(blocks, map(_is_none, map(held.pop, blocks, repeat(False)))))
        holders = self._holders
        if list(map(holders.__getitem__, present)).count(member) == len(present):
            # The member alone held them all (an engine's own history): dropped in C.
            _consume(map(holders.__delitem__, present))
        else:
            runs = _Runs()
            for block in present:
                self._drop_holder(block, member, runs)
        if not held:
            del self._members[member]

    def forget(self, member: str) -> None:
        """`member` holds nothing any more (it left, restarted or cleared its cache)."""
        held = self._members.pop(member, None)
        if held is None:
            return
        runs = _Runs()
        for block in held:
            self._drop_holder(block, member, runs)

    def _drop_holder(self, block: int, member: str, runs: _Runs) -> None:
        current = self._holders[block]
        if current is not runs.old:
            runs.old, runs.new = current, _without(current, member)
        if runs.new is None:
            del self._holders[block]
        else:
            self._holders[block] = runs.new

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
        return frozenset((current,)) if isinstance(current, str) else current

    def matches(self, blocks: Sequence[int], limit: int | None = None) -> dict[str, int]:
        """{member: leading blocks of `blocks` it holds, when at least one} for the members
        holding the deepest of them — only those are looked at, never the whole fleet.

        The walk goes from the last key towards the first, one run of keys with the same
        holder value at a time (a conversation's history on one member, a prefix on
        many: the run's start is found by bisection, so a 128-key prompt costs a few
        lookups per run, not 128). Every member whose leading match is at least one key
        is met before the walk passes that match's last key, so nothing that matches is
        missed. With `limit`, the walk stops before a run whose holders would bring the
        count over `limit`: a prefix that more members hold than that is one nearly
        everyone shares, and holding it tells members apart no better than load does
        (the caller scores a few members by load instead). The dict's order carries no
        meaning (sets of names iterate in a per-process order)."""
        get = self._holders.get
        members = self._members
        found: dict[str, int] = {}
        cap = len(members) if limit is None else limit
        end = len(blocks) - 1
        while end >= 0:
            current = get(blocks[end])
            fresh: Sequence[str] = ()
            if isinstance(current, str):
                if current not in found:
                    if len(found) + 1 > cap:
                        break
                    fresh = (current,)
            elif current is not None and not current <= found.keys():
                if len(current) > cap:
                    break
                fresh = [m for m in current if m not in found]
                if len(found) + len(fresh) > cap:
                    break
            low, high = 0, end  # the run's first key: every key from it up to `end` has `current`
            while low < high:
                middle = (low + high) // 2
                if get(blocks[middle]) is current:
                    high = middle
                else:
                    low = middle + 1
            end = low - 1
            for member in fresh:
                matched = leading_held(members[member], blocks)
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
        assert all(isinstance(h, str) or (isinstance(h, frozenset) and len(h) >= 2) for h in self._holders.values())
