"""Every PromQL query the autoscaler runs, in one place.

Engine series are selected by `namespace` and `pod`, the two labels every
Kubernetes pod scrape carries (whatever else a Prometheus relabels), with the
pod names of the resource's engine pods; router series by its router pods.
Every engine signal is asked under vLLM's name `or` SGLang's
(`prefixroute.engine_metrics`): a pod exports one family, and `or` keeps the
first query's series for each pod, so one query serves vLLM, SGLang and
engine-sim fleets alike. vLLM renamed its KV usage gauge
(gpu_cache_usage_perc → kv_cache_usage_perc); both are accepted, the newer
first. SGLang's queue gauges are read at their total (`priority=""`), not
their per-priority breakdown.

Batched: one query per signal for every model that ticks in a round, not one per model. Per-pod
signals select the models' namespaces and keep one series per (namespace, pod): the reader
picks each model's pods out of them. The fleet's TTFT quantiles need each model's pods summed
before the quantile, which Prometheus cannot group by a model it does not know; so one query
holds every model's sum, tagged by label_replace with the model's place in the batch
(``FLEET_LABEL``), ``CHUNK`` models a query so the query string stays short enough for a URL.

Two windows: `window` (the scale-up window) for what drives scaling up —
request rate and the TTFT histogram — and the longer `hit_window` for prefix
cache hits. The coldest member is chosen for removal after a calm spell of a
whole scale-down window, when a short rate would read zero on every member; the
long window still remembers which members served the cached prefixes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prefixroute.engine_metrics import FAMILIES, TOTAL_ONLY


def string(value: str) -> str:
    """A PromQL double-quoted string. PromQL takes Go's escapes: a regex's backslash must be
    doubled (``pod=~"a\\.b"``), or Prometheus answers "unknown escape sequence"."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


FLEET_LABEL = "prefixroute_fleet"
CHUNK = 20
"""Models in one TTFT query. Prometheus joins a chain of ``or`` one step at a time, copying
what came before: measured on 1,000 fleets of 4 engines, 25 models a query took 51 ms and
100 models 900 ms, so small queries (run side by side) beat long ones."""
POD = "namespace, pod"
"""What per-pod series are kept by: a pod name is unique within its namespace."""


def pod_selector(namespace: str, pods: Iterable[str]) -> str:
    names = sorted(set(pods))
    pattern = "|".join(re.escape(p) for p in names) or "$^"  # "$^" matches nothing
    return f"namespace={string(namespace)},pod=~{string(pattern)}"


def namespace_selector(namespaces: Iterable[str]) -> str:
    names = sorted(set(namespaces))
    if len(names) == 1:
        return f"namespace={string(names[0])}"
    return f"namespace=~{string('|'.join(re.escape(n) for n in names) or '$^')}"


def seconds(value: float) -> str:
    """A PromQL duration in whole seconds (Prometheus needs at least two scrapes in a rate window)."""
    return f"{max(1, round(value))}s"


def _either(template: str, names: Iterable[str]) -> str:
    """``template`` (with ``{name}``) for each metric name, joined with PromQL's ``or``."""
    return " or ".join(template.format(name=name) for name in names)


def _matchers(selector: str, name: str) -> str:
    extra = TOTAL_ONLY.get(name)
    return f"{selector},{extra}" if extra else selector


def engine_queries(selector: str, window: str, hit_window: str | None = None, by: str = POD) -> dict[str, str]:
    """Per-pod engine signals (each result is one series per pod, labelled ``by``)."""
    hits = hit_window or window

    def gauge(agg: str, names: Iterable[str]) -> str:
        return " or ".join(f"{agg} by ({by}) ({name}{{{_matchers(selector, name)}}})" for name in names)

    def rate(names: Iterable[str], over: str) -> str:
        return _either(f"sum by ({by}) (rate({{name}}{{{{{selector}}}}}[{over}]))", names)

    return {
        "waiting": gauge("sum", (f.waiting for f in FAMILIES)),
        "running": gauge("sum", (f.running for f in FAMILIES)),
        "kv_usage": gauge("max", (n for f in FAMILIES for n in f.kv_usage)),
        "hit_tokens_rate": rate((f.hit_tokens for f in FAMILIES), hits),
        "query_tokens_rate": rate((f.query_tokens for f in FAMILIES), hits),
        "request_rate": rate((f.requests for f in FAMILIES), window),
        # When each pod's running gauge was last scraped: older than a few intervals is stale.
        "last_scrape": _either(f"max by ({by}) (timestamp({{name}}{{{{{selector}}}}}))", (f.running for f in FAMILIES)),
    }


def ttft_sum(selector: str, window: str) -> str:
    """The engines' TTFT histogram summed over the selected pods, by bucket."""
    return _either(f"sum by (le) (rate({{name}}{{{{{selector}}}}}[{window}]))", (f.ttft_bucket for f in FAMILIES))


def fleets_ttft_queries(selectors: Iterable[str], window: str) -> dict[str, str]:
    """The TTFT quantiles of several fleets (each given by its engine pods' selector) in one
    query each: every fleet's histogram sum tagged ``FLEET_LABEL`` = its place in the list."""
    tagged = " or ".join(
        f'label_replace({ttft_sum(selector, window)}, "{FLEET_LABEL}", "{i}", "", "")'
        for i, selector in enumerate(selectors)
    )
    return {"ttft_p50": f"histogram_quantile(0.5, {tagged})", "ttft_p90": f"histogram_quantile(0.9, {tagged})"}


def routers_queries(selector: str, window: str, by: str = POD) -> dict[str, str]:
    """Per-pod router signals (each result is one series per router pod, labelled ``by``): the
    load imbalance each router sees, and the demand the routers hold for want of an engine (a
    model at zero replicas wakes on it) — requests waiting now, and holds of the window that
    ended without an engine."""
    return {
        "router_imbalance": f"max by ({by}) (prefixroute_router_load_imbalance{{{selector}}})",
        "held": f"sum by ({by}) (prefixroute_router_held_requests{{{selector}}})",
        "held_unserved": (
            f'sum by ({by}) (increase(prefixroute_router_holds_total{{{selector},outcome=~"timeout|full"}}[{window}]))'
        ),
    }
