"""Reading the few numbers the bench needs from an engine's Prometheus text."""

from __future__ import annotations

import math

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
SUCCESS = "vllm:request_success_total"
WANTED = (HITS, QUERIES, SUCCESS)


def parse_sums(text: str, names: tuple[str, ...] = WANTED) -> dict[str, float]:
    """The sum over label sets of each named sample (0 when absent)."""
    sums = {name: 0.0 for name in names}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if at != -1:
                name_end = min(name_end, at)
        name = line[:name_end]
        if name in sums:
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            if not math.isnan(value):
                sums[name] += value
    return sums
