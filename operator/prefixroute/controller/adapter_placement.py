"""Which engine pods register which LoRA adapters (pure).

While the adapters fit in an engine's slots (adapters <= maxLoras) every ready engine
registers every adapter: any replica can serve any request, as without adapters. With more
adapters than slots, registering all of them everywhere would make every engine swap
adapters in and out of its slots; instead each adapter goes to a subset of the engines, of

    size = min(replicas, max(1, ceil(replicas * maxLoras / adapters)))

so that the registrations per engine stay near maxLoras on average (replicas * maxLoras
slots shared by the adapters) and every adapter has at least one engine.

Which engines: rendezvous (highest-random-weight) hashing. Each (adapter, pod) pair gets a
score from a stable hash; an adapter goes to the ``size`` pods with the highest scores.
Adding a pod moves only the adapters for which the new pod now scores in the top ``size``;
removing one moves only the adapters it held, each to its next-best pod. Every operator
replica and every restart computes the same placement from the same pod names.
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
    for adapter in names:
        ranked = sorted(members, key=lambda pod: (score(adapter, pod), pod), reverse=True)
        for pod in ranked[:size]:
            chosen[pod].add(adapter)
    return {pod: frozenset(found) for pod, found in chosen.items()}


def holders(placement: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """The placement turned around: each adapter's pods, sorted."""
    out: dict[str, list[str]] = {}
    for pod in sorted(placement):
        for adapter in placement[pod]:
            out.setdefault(adapter, []).append(pod)
    return {adapter: out[adapter] for adapter in sorted(out)}
