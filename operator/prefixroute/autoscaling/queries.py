"""Every PromQL query the autoscaler runs, in one place.

Engine series are selected by `namespace` and `pod`, the two labels every
Kubernetes pod scrape carries (whatever else a Prometheus relabels), with the
pod names of the resource's engine pods; router series by its router pods.
vLLM renamed its KV usage gauge (gpu_cache_usage_perc → kv_cache_usage_perc);
both are accepted, the newer first.

Two windows: `window` (the scale-up window) for what drives scaling up —
request rate and the TTFT histogram — and the longer `hit_window` for prefix
cache hits. The coldest member is chosen for removal after a calm spell of a
whole scale-down window, when a short rate would read zero on every member; the
long window still remembers which members served the cached prefixes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


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


def engine_queries(selector: str, window: str, hit_window: str | None = None) -> dict[str, str]:
    """Per-pod engine signals (each result is one series per pod)."""
    hits = hit_window or window
    return {
        "waiting": f"sum by (pod) (vllm:num_requests_waiting{{{selector}}})",
        "running": f"sum by (pod) (vllm:num_requests_running{{{selector}}})",
        "kv_usage": (
            f"max by (pod) (vllm:kv_cache_usage_perc{{{selector}}})"
            f" or max by (pod) (vllm:gpu_cache_usage_perc{{{selector}}})"
        ),
        "hit_tokens_rate": f"sum by (pod) (rate(vllm:prefix_cache_hits_total{{{selector}}}[{hits}]))",
        "query_tokens_rate": f"sum by (pod) (rate(vllm:prefix_cache_queries_total{{{selector}}}[{hits}]))",
        "request_rate": f"sum by (pod) (rate(vllm:e2e_request_latency_seconds_count{{{selector}}}[{window}]))",
        # When each pod's running gauge was last scraped: older than a few intervals is stale.
        "last_scrape": f"max by (pod) (timestamp(vllm:num_requests_running{{{selector}}}))",
    }


def fleet_queries(selector: str, router_selector: str, window: str) -> dict[str, str]:
    """Fleet-wide signals (each result is a single series, or none)."""
    ttft = f"sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}[{window}]))"
    return {
        "ttft_p50": f"histogram_quantile(0.5, {ttft})",
        "ttft_p90": f"histogram_quantile(0.9, {ttft})",
        "router_imbalance": f"max(prefixroute_router_load_imbalance{{{router_selector}}})",
    }
