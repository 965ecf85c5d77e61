"""Which engine pods register which LoRA adapters (pure).

While the adapters fit in an engine's slots (adapters <= maxLoras) every ready engine
registers every adapter: any replica can serve any request, as without adapters. With more
adapters than slots, registering all of them everywhere would make every engine swap
adapters in and out of its slots; instead each adapter goes to a subset of the engines, of

    size = min(replicas, max(1, ceil(replicas * maxLoras / adapters)))

so that the registrations per engine stay near maxLoras on average (replicas * maxLoras
slots shared by the adapters) and every adapter has at least one engine.

Which engines: rendezvous (highest-random-weight) hashing with bounded load. Each (adapter,
pod) pair gets a score from a stable hash; adapters are taken in name order, each to the
``size`` pods with the highest scores among those holding fewer than the average (adapters x
size / pods, rounded up). Plain rendezvous left the load to chance: two adapters on two
engines of one slot each landed on the same engine half the time, one engine swapping both
through its slot while the other served neither. With the bound, no engine holds more than
its share rounded up (when the pods with room are fewer than ``size``, a full pod makes room
by handing one of its adapters to a pod with room). A pod added or removed moves the adapters
whose pods it changes and a few more where the bound shifts (50 adapters on 8 pods of 4
slots: the busiest pod holds 7 instead of 9; a ninth pod moves 10 adapters and removing one
moves 7, against 6 and 5 without the bound). Every operator replica and every restart
computes the same placement from the same pod names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping


def subset_size(replicas: int, adapters: int, max_loras: int) -> int:
    """How many engines register each adapter (0 without engines)."""
    if replicas <= 0:
        return 0
    if adapters <= max_loras:
        return replicas
    return min(replicas, max(1, math.ceil(replicas * max_loras / adapters)))


def score(adapter: str, pod: str) -> int:
    """The pair's rendezvous score: equal in every process (not Python's salted hash)."""
    digest = hashlib.blake2b(f"{adapter}\0{pod}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def place(adapters: Iterable[str], pods: Iterable[str], max_loras: int) -> dict[str, frozenset[str]]:
    """Each pod's adapters (every pod present, with none when nothing goes there)."""
    names, members = sorted(set(adapters)), sorted(set(pods))
    size = subset_size(len(members), len(names), max_loras)
    chosen: dict[str, set[str]] = {pod: set() for pod in members}
    bound = math.ceil(len(names) * size / len(members)) if members else 0
    for adapter in names:
        ranked = sorted(members, key=lambda pod: (score(adapter, pod), pod), reverse=True)
        taken = [pod for pod in ranked if len(chosen[pod]) < bound][:size]
        for pod in taken:
            chosen[pod].add(adapter)
        for _ in range(size - len(taken)):
            _swap_in(adapter, ranked, chosen, bound)
    return {pod: frozenset(found) for pod, found in chosen.items()}


def _swap_in(adapter: str, ranked: list[str], chosen: dict[str, set[str]], bound: int) -> None:
    """One more pod for `adapter` when every pod without it is full (the room left is on pods
    that hold it already: three adapters on two of three pods each can end so). The best-scored
    full pod without it hands one of its adapters that the roomiest pod lacks to that pod and
    takes `adapter` instead: every pod stays within the bound, every adapter on its number."""
    roomy = min((pod for pod in chosen if len(chosen[pod]) < bound), key=lambda pod: (len(chosen[pod]), pod))
    full = next(pod for pod in ranked if adapter not in chosen[pod])
    moved = min(chosen[full] - chosen[roomy])  # a full pod holds more than the roomy one: one differs
    chosen[full].remove(moved)
    chosen[roomy].add(moved)
    chosen[full].add(adapter)


def holders(placement: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """The placement turned around: each adapter's pods, sorted."""
    out: dict[str, list[str]] = {}
    for pod in sorted(placement):
        for adapter in placement[pod]:
            out.setdefault(adapter, []).append(pod)
    return {adapter: out[adapter] for adapter in sorted(out)}
