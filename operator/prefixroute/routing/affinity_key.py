"""The affinity key: a hash of the first blocks that tell requests apart, past what nearly all share.

Hashing a fixed number of leading blocks (prefix-hash's K) keys every request on
the same block when they all start with one long system prompt: one ring owner
for the whole fleet, and the bounded-load walk then places requests by load
alone, so a conversation's turns scatter (KubeAI issue 519; `bench fleet`
measures it). So the key skips the leading blocks that more of the traffic
shares than one member may take — `load_factor` / members, the bounded-load
share: a prefix with more traffic than that has no single owner anyway, and
keying on it only says "spill along the ring by load" — and is the chained hash
of the first block after them. A session's first turn and every later one start
with the same blocks, so they keep one key; different sessions get different
keys.

What is shared is learned from the traffic (`SharedPrefixes`): an exponentially
decayed share of recent requests that each leading block key appears in, counted
over a sample of one request in `SAMPLE` (by a hash of the whole prompt, so every
replica samples the same requests) to keep the cost off most decisions. The
memory is 32 counted requests per member (at least 4,096), so that at steady
state a prefix must appear in 40 of them (32 x load_factor) before it can count
as shared, and never in fewer (`MIN_COUNT`): one conversation's own blocks, in a
handful of turns, never do, while a system prompt in nearly every request does
after about 160 requests. Router replicas that see
the same traffic learn the same shares; a block's share only matters near the
threshold. Until a prefix has been seen enough its key is the plain
first-K-blocks key, as before; when nothing is shared the key is exactly that.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefixroute.routing.request import RoutingRequest

SAMPLE = 4  # one request in SAMPLE is counted (chosen by a hash of its whole prompt, the same on every replica)
MIN_WINDOW = 4096  # counted requests: the shortest memory of the shares
WINDOW_PER_MEMBER = 32  # ...and 32 per member, so a share of load_factor / members is 32 x load_factor of them
MIN_COUNT = 40.0  # a key counts as shared only once seen in this many counted requests (32 x 1.25)
_RESCALE = 1e200


def window_for(members: int) -> int:
    return max(MIN_WINDOW, WINDOW_PER_MEMBER * members)


class SharedPrefixes:
    """The decayed share of requests each leading block key appeared in.

    Decay is lazy: every observation adds the current `unit` (to each key it holds and
    to the total) and the unit grows by 1/(1 - 1/window) per request, so a share is a
    key's weight over the total without touching every entry on every request. While
    fewer than a window of requests have been seen the total is small and shares are
    plain fractions of what was seen; a key must also have been seen `MIN_COUNT` times,
    so a few early requests cannot make their own blocks look shared. Every quarter
    window, entries worth less than half a request are dropped (a key seen once goes
    after about 0.7 windows), which bounds memory by the keys of the last window."""

    __slots__ = ("_growth", "_seen", "_total", "_unit", "_weights", "window")

    def __init__(self, window: int = MIN_WINDOW) -> None:
        self._weights: dict[int, float] = {}
        self._total = 0.0
        self._unit = 1.0
        self._seen = 0
        self.window = window
        self._growth = 1.0 / (1.0 - 1.0 / window)

    def resize(self, window: int) -> None:
        """A new memory length (the fleet changed size): shares are kept, the decay changes."""
        if window != self.window:
            self.window = window
            self._growth = 1.0 / (1.0 - 1.0 / window)

    def share(self, block: int) -> float:
        """The decayed share of recent requests whose leading blocks included `block`."""
        return self._weights.get(block, 0.0) / self._total if self._total else 0.0

    def depth(self, blocks: Sequence[int], share: float) -> int:
        """How many leading blocks of `blocks` more than `share` of recent requests held (and
        at least MIN_COUNT of them).

        Along one chain of keys the shares never grow (a request holding key i holds every
        key before it, and is observed for all of them alike), so a bisection finds the
        depth in a few lookups."""
        get = self._weights.get
        floor = max(share * self._total, MIN_COUNT * self._unit)
        low, high = 0, len(blocks)
        while low < high:
            middle = (low + high) // 2
            if get(blocks[middle], 0.0) > floor:
                low = middle + 1
            else:
                high = middle
        return low

    def observe(self, blocks: Sequence[int]) -> None:
        """One request whose leading blocks are `blocks`."""
        weights = self._weights
        unit = self._unit
        for block in blocks:
            weights[block] = weights.get(block, 0.0) + unit
        self._total += unit
        self._unit = unit * self._growth
        self._seen += 1
        if self._unit > _RESCALE:
            scale = 1.0 / self._unit
            for block in weights:
                weights[block] *= scale
            self._total *= scale
            self._unit = 1.0
        if self._seen % (self.window // 4) == 0:
            floor = 0.5 * self._unit
            for block in [b for b, w in weights.items() if w < floor]:
                del weights[block]

    def __len__(self) -> int:
        return len(self._weights)


class AffinityKeys:
    """A strategy's affinity keys: learned shares, and the key of each request from them."""

    __slots__ = ("_last", "_window_members", "load_factor", "prefix_blocks", "shared")

    def __init__(self, prefix_blocks: int, load_factor: float) -> None:
        self.prefix_blocks = prefix_blocks
        self.load_factor = load_factor
        self.shared = SharedPrefixes()
        # The last request asked about, the fleet size, and its shared depth (select, then learn).
        self._last: tuple[RoutingRequest | None, int, int] = (None, 0, 0)
        self._window_members = -1  # the fleet size `shared`'s window was last sized for

    def _depth(self, request: RoutingRequest, members: int) -> int:
        last, size, depth = self._last
        if last is not request or size != members:
            if members != self._window_members:  # the window changes only with the fleet's size
                self.shared.resize(window_for(members))
                self._window_members = members
            share = self.load_factor / members if members else 1.0
            depth = self.shared.depth(request.blocks, share) if share < 1.0 else 0
            self._last = (request, members, depth)
        return depth

    def key(self, request: RoutingRequest, members: int) -> int:
        """The key of `request` in a fleet of `members`: the chained hash of the first block after
        the shared ones (it covers them too, and one block already tells conversations apart;
        more would change between a short first turn and the longer ones after it), or of the
        whole prompt when nothing but a partial block follows them."""
        depth = self._depth(request, members)
        if depth == 0:
            return request.key
        blocks = request.blocks
        if len(blocks) > depth:
            return blocks[depth]
        return request.whole or request.key

    def learn(self, request: RoutingRequest) -> None:
        """Count `request` (once it is routed, after `key`) among the traffic, if it is in the
        sample: its shared blocks and the 8K after them, so a prefix that is becoming shared
        is learned 8K blocks (8 x 1k characters at the defaults) at a time."""
        if request.whole % SAMPLE:
            return
        last, _, depth = self._last
        if last is not request:
            depth = 0  # routed without a key asked for (not through select): count its first blocks
        self.shared.observe(request.blocks[: depth + 8 * self.prefix_blocks])

    def learn_elsewhere(self, request: RoutingRequest, members: int) -> None:
        """Count `request`, which another router replica routed in a fleet of `members`, as
        `learn` counts this router's own (its shared depth found first, as `key` finds it)."""
        if request.whole % SAMPLE:
            return
        self._depth(request, members)
        self.learn(request)
