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


def pod_selector(namespace: str, pods: Iterable[str]) -> str:
    names = sorted(set(pods))
    pattern = "|".join(re.escape(p) for p in names) or "$^"  # "$^" matches nothing
    return f"namespace={string(namespace)},pod=~{string(pattern)}"


def seconds(value: float) -> str:
    """A PromQL duration in whole seconds (Prometheus needs at least two scrapes in a rate window)."""
    return f"{max(1, round(value))}s"


def _either(template: str, names: Iterable[str]) -> str:
    """``template`` (with ``{name}``) for each metric name, joined with PromQL's ``or``."""
    return " or ".join(template.format(name=name) for name in names)


def _matchers(selector: str, name: str) -> str:
    extra = TOTAL_ONLY.get(name)
    return f"{selector},{extra}" if extra else selector


def engine_queries(selector: str, window: str, hit_window: str | None = None) -> dict[str, str]:
    """Per-pod engine signals (each result is one series per pod)."""
    hits = hit_window or window

    def gauge(agg: str, names: Iterable[str]) -> str:
        return " or ".join(f"{agg} by (pod) ({name}{{{_matchers(selector, name)}}})" for name in names)

    def rate(names: Iterable[str], over: str) -> str:
        return _either(f"sum by (pod) (rate({{name}}{{{{{selector}}}}}[{over}]))", names)

    return {
        "waiting": gauge("sum", (f.waiting for f in FAMILIES)),
        "running": gauge("sum", (f.running for f in FAMILIES)),
        "kv_usage": gauge("max", (n for f in FAMILIES for n in f.kv_usage)),
        "hit_tokens_rate": rate((f.hit_tokens for f in FAMILIES), hits),
        "query_tokens_rate": rate((f.query_tokens for f in FAMILIES), hits),
        "request_rate": rate((f.requests for f in FAMILIES), window),
        # When each pod's running gauge was last scraped: older than a few intervals is stale.
        "last_scrape": _either(f"max by (pod) (timestamp({{name}}{{{{{selector}}}}}))", (f.running for f in FAMILIES)),
    }


def fleet_queries(selector: str, router_selector: str, window: str) -> dict[str, str]:
    """Fleet-wide signals (each result is a single series, or none)."""
    ttft = _either(f"sum by (le) (rate({{name}}{{{{{selector}}}}}[{window}]))", (f.ttft_bucket for f in FAMILIES))
    return {
        "ttft_p50": f"histogram_quantile(0.5, {ttft})",
        "ttft_p90": f"histogram_quantile(0.9, {ttft})",
        "router_imbalance": f"max(prefixroute_router_load_imbalance{{{router_selector}}})",
        **router_queries(router_selector, window),
    }


def router_queries(router_selector: str, window: str) -> dict[str, str]:
    """Demand the routers hold for want of an engine (a model at zero replicas wakes on it):
    requests waiting now, and holds of the window that ended without an engine."""
    return {
        "held": f"sum(prefixroute_router_held_requests{{{router_selector}}})",
        "held_unserved": (
            f'sum(increase(prefixroute_router_holds_total{{{router_selector},outcome=~"timeout|full"}}[{window}]))'
        ),
    }
