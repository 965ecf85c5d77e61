"""Reading a fleet's signals from Prometheus (the edge; prometheus-api-client).

Anything missing or stale raises MetricsUnavailable with a reason a user can act
on; the operator then holds the replica count and says why in a condition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prefixroute.autoscale import queries
from prefixroute.autoscale.signals import FleetSignals, MemberSignals

QueryFn = Callable[[str], Sequence[Mapping[str, Any]]]


class MetricsUnavailable(Exception):
    """Prometheus cannot be reached, or it has no fresh metrics for the engines."""


def prometheus_query(url: str, timeout_seconds: float = 5.0) -> QueryFn:
    """An instant-query function over prometheus-api-client, mapping its errors."""
    from prometheus_api_client import PrometheusConnect  # imported here: only the operator needs it

    client = PrometheusConnect(url=url, disable_ssl=True)

    def run(query: str) -> Sequence[Mapping[str, Any]]:
        try:
            return client.custom_query(query, params={"timeout": f"{timeout_seconds:g}s"})
        except Exception as exc:  # requests' and the client's errors alike: the edge maps them all
            raise MetricsUnavailable(f"Prometheus at {url} failed: {type(exc).__name__}: {exc}") from exc

    return run


def _by_pod(result: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for series in result:
        pod = series.get("metric", {}).get("pod")
        value = float(series["value"][1])
        if pod and not math.isnan(value):
            out[pod] = value
    return out


def _scalar(result: Sequence[Mapping[str, Any]]) -> float | None:
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) or math.isinf(value) else value


def read_signals(
    query: QueryFn,
    namespace: str,
    engine_pods: Iterable[str],
    router_pods: Iterable[str],
    now: float,
    window: str = "1m",
    stale_after_seconds: float = 60.0,
) -> FleetSignals:
    """The fleet's signals now. `now` is wall-clock seconds (it is compared with scrape times)."""
    pods = sorted(set(engine_pods))
    if not pods:
        raise MetricsUnavailable("the resource has no engine pods to read metrics for")
    selector = queries.pod_selector(namespace, pods)
    per_pod = {name: _by_pod(query(q)) for name, q in queries.engine_queries(selector, window).items()}
    missing = [p for p in pods if p not in per_pod["running"] or p not in per_pod["waiting"]]
    if missing:
        raise MetricsUnavailable(f"no vLLM metrics in Prometheus for engine pods {', '.join(missing)}")
    stale = [p for p in pods if now - per_pod["last_scrape"].get(p, 0.0) > stale_after_seconds]
    if stale:
        raise MetricsUnavailable(
            f"metrics of {', '.join(stale)} are older than {stale_after_seconds:.0f}s (scrapes failing?)"
        )
    members = tuple(
        MemberSignals(
            name=p,
            waiting=per_pod["waiting"][p],
            running=per_pod["running"][p],
            kv_usage=per_pod["kv_usage"].get(p, 0.0),
            hit_tokens_rate=per_pod["hit_tokens_rate"].get(p, 0.0),
            query_tokens_rate=per_pod["query_tokens_rate"].get(p, 0.0),
            request_rate=per_pod["request_rate"].get(p, 0.0),
        )
        for p in pods
    )
    router_selector = queries.pod_selector(namespace, router_pods)
    fleet = {name: _scalar(query(q)) for name, q in queries.fleet_queries(selector, router_selector, window).items()}
    return FleetSignals(
        at=now,
        members=members,
        ttft_p50=fleet["ttft_p50"],
        ttft_p90=fleet["ttft_p90"],
        router_imbalance=fleet["router_imbalance"],
    )
