"""Consistent-hash ring with weighted members and virtual nodes.

Each member owns `round(virtual_nodes * weight)` points; a key belongs to the
first point clockwise from it. Adding or removing one of N equal members moves
about 1/N of the keys, which is what keeps caches warm through scaling.
Weight 0 keeps a member out of the ring (a draining or slow-starting replica
at its very beginning); its name can still be known to the router.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping

import xxhash

from prefixroute.routing.knobs import VIRTUAL_NODES

DEFAULT_VIRTUAL_NODES = VIRTUAL_NODES.default


def _point(name: str, replica: int) -> int:
    return xxhash.xxh3_64_intdigest(f"{name}#{replica}".encode())


class HashRing:
    """An immutable ring built from {member name: weight}."""

    __slots__ = ("_by_member", "_names", "_owners", "_points")

    def __init__(self, weights: Mapping[str, float], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        if virtual_nodes <= 0:
            raise ValueError("virtual_nodes must be positive")
        pairs: list[tuple[int, str]] = []
        for name, weight in weights.items():
            if weight < 0:
                raise ValueError(f"member {name!r} has a negative weight")
            count = round(virtual_nodes * weight)
            if weight > 0:
                count = max(1, count)
            pairs.extend((_point(name, i), name) for i in range(count))
        # Ties between points (astronomically rare) are broken by name, so every
        # router instance builds exactly the same ring from the same members.
        pairs.sort()
        self._points = [p for p, _ in pairs]
        self._owners = [n for _, n in pairs]
        self._names = frozenset(self._owners)
        self._by_member: dict[str, list[int]] = {}  # each member's own points, sorted
        for point, name in pairs:
            self._by_member.setdefault(name, []).append(point)

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def __len__(self) -> int:
        return len(self._names)

    def walk(self, key: int) -> Iterator[str]:
        """Distinct members clockwise from `key`: the owner first, then its successors."""
        points = self._points
        if not points:
            return
        total = len(points)
        start = bisect.bisect_left(points, key % (1 << 64))
        seen: set[str] = set()
        found, wanted = 0, len(self._names)  # a count beside `seen`: no len() call per member met
        owners = self._owners
        for step in range(total):
            name = owners[(start + step) % total]
            if name not in seen:
                seen.add(name)
                yield name
                found += 1
                if found == wanted:
                    return

    def owner(self, key: int) -> str | None:
        return next(self.walk(key), None)

    def distance(self, key: int, name: str) -> int:
        """How far clockwise from `key` the member's first point lies (0 = on it).

        Members ordered by distance are in `walk` order (points at equal distance, as
        rare as equal points, go by name in both), so comparing a few members' distances
        is the walk's tie-breaker at the cost of one bisection each, not of a walk
        around the whole ring. A member not on the ring is farther than any that is."""
        points = self._by_member.get(name)
        if not points:
            return 1 << 64
        key %= 1 << 64
        i = bisect.bisect_left(points, key)
        return (points[i] if i < len(points) else points[0] + (1 << 64)) - key

    def rank(self, key: int) -> dict[str, int]:
        """Each member's position in the walk from `key` (0 = owner): a shared tie-breaker."""
        return {name: i for i, name in enumerate(self.walk(key))}
