"""Reading numbers from a server's Prometheus text, off any hot path: benches, e2e and tests.

prometheus_client's own parser reads the text (label values with braces, spaces or escapes,
timestamps, every metric type), so no caller parses lines by hand. Sums skip NaN samples.
The router's periodic engine scrape keeps a parser of its own (`front.scrape`): it runs
on the event loop that serves requests, where this one measured 33-151x slower.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
SUCCESS = "vllm:request_success_total"
WANTED = (HITS, QUERIES, SUCCESS)


def samples(text: str) -> list[Sample]:
    """Every sample of the exposition, with its own name (a counter's ``_total``, a
    histogram's ``_bucket``/``_sum``/``_count``) and labels."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def types(text: str) -> dict[str, str]:
    """Each family's declared type by the name in its ``# TYPE`` line (counter, gauge, ...)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def total(found: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include every one of `labels`."""
    return sum(
        (
            s.value
            for s in found
            if s.name == name and not math.isnan(s.value) and all(s.labels.get(k) == v for k, v in labels.items())
        ),
        0.0,
    )


def by_label(found: Iterable[Sample], name: str, label: str) -> dict[str, float]:
    """The samples called `name` summed per value of `label` (absent: "")."""
    out: dict[str, float] = {}
    for s in found:
        if s.name == name and not math.isnan(s.value):
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def parse_sums(text: str, names: tuple[str, ...] = WANTED) -> dict[str, float]:
    """The sum over label sets of each named sample (0 when absent)."""
    found = samples(text)
    return {name: total(found, name) for name in names}


def renamed(found: Iterable[Sample], prefix: str, as_prefix: str) -> list[Sample]:
    """The samples with `prefix` at the start of a name written `as_prefix` (the EPP's
    ``prefixroute_epp_`` read as the router's ``prefixroute_router_``: the same front metrics)."""
    if prefix == as_prefix:
        return list(found)
    return [s._replace(name=as_prefix + s.name[len(prefix) :]) if s.name.startswith(prefix) else s for s in found]
