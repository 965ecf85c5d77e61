"""Reading a fleet's signals from Prometheus query results (pure: the query function is given).

Anything missing or stale raises MetricsUnavailable with a reason a user can act
on; the operator then holds the replica count and says why in a condition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prefixroute.autoscaling import queries
from prefixroute.autoscaling.settings import AutoscalingSettings, PrometheusTLS
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals

QueryFn = Callable[[str], Sequence[Mapping[str, Any]]]
Verify = bool | str
"""How a client checks an https Prometheus's certificate (requests' ``verify``): True against
the public CAs, a CA bundle file's path against that bundle, False not at all."""
TrustFn = Callable[[str, PrometheusTLS | None], Verify]
"""(namespace, spec.autoscaling.prometheusTLS) -> Verify; raises MetricsUnavailable."""

# MetricsUnavailable.reason: the MetricsAvailable condition's reason when it is False
UNREACHABLE, NO_ENGINE_PODS, MISSING, STALE = "PrometheusUnreachable", "NoEnginePods", "MetricsMissing", "MetricsStale"
NOT_SCRAPED_YET = "WaitingForFirstScrape"
TLS_FAILED = "PrometheusTLSFailed"  # the handshake failed: most often a certificate no trusted CA signed
CA_UNAVAILABLE = "PrometheusCAUnavailable"  # the named Secret or ConfigMap, or its key, cannot be read
CA_INVALID = "PrometheusCAInvalid"  # it holds no PEM certificate that loads
WAITING = frozenset({NO_ENGINE_PODS, NOT_SCRAPED_YET})
"""Reasons that are not faults: a fleet starting up (no engine ready yet, or only engines
Prometheus has not scraped yet) has no signals to read, and nothing is wrong."""
STALE_AFTER_SECONDS = 60.0


class MetricsUnavailable(Exception):
    """Prometheus cannot be reached, or it has no fresh metrics for the engines.

    `reason` is one of UNREACHABLE, TLS_FAILED, CA_UNAVAILABLE, CA_INVALID, NO_ENGINE_PODS,
    NOT_SCRAPED_YET, MISSING, STALE: the operator keys
    its "once per new problem" Event on it, because messages carry details that vary."""

    def __init__(self, message: str, reason: str = UNREACHABLE) -> None:
        super().__init__(message)
        self.reason = reason


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
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    hit_window: str | None = None,
    young: Iterable[str] = (),
    at_zero: bool = False,
) -> FleetSignals:
    """The fleet's signals now. `now` is wall-clock seconds (it is compared with scrape times).

    Pods named in `young` became ready so recently that Prometheus may not have scraped
    them yet: without series they are left out of the snapshot instead of failing it.
    ``at_zero``: the model may scale to zero, so no engine pod at all is a state to read
    (the routers' held requests), not a fleet still starting."""
    pods = sorted(set(engine_pods))
    if not pods:
        if not at_zero:
            raise MetricsUnavailable("the resource has no ready engine pods to read metrics for", NO_ENGINE_PODS)
        # a model that may sit at zero engines: what its routers hold is all there is to read
        router = queries.router_queries(queries.pod_selector(namespace, router_pods), window)
        found = {name: _scalar(query(q)) for name, q in router.items()}
        return FleetSignals(at=now, members=(), held=(found["held"] or 0.0) + (found["held_unserved"] or 0.0))
    selector = queries.pod_selector(namespace, pods)
    per_pod = {name: _by_pod(query(q)) for name, q in queries.engine_queries(selector, window, hit_window).items()}
    unscraped = [p for p in pods if p not in per_pod["running"] or p not in per_pod["waiting"]]
    waiting_for = set(young)
    missing = [p for p in unscraped if p not in waiting_for]
    if missing:
        raise MetricsUnavailable(
            f"no engine metrics (vLLM's or SGLang's) in Prometheus for engine pods {', '.join(missing)}", MISSING
        )
    pods = [p for p in pods if p not in unscraped]
    if not pods:
        raise MetricsUnavailable("no engine pod has been scraped yet", NOT_SCRAPED_YET)
    stale = [p for p in pods if now - per_pod["last_scrape"].get(p, 0.0) > stale_after_seconds]
    if stale:
        raise MetricsUnavailable(
            f"metrics of {', '.join(stale)} are older than {stale_after_seconds:.0f}s (scrapes failing?)", STALE
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
        held=(fleet["held"] or 0.0) + (fleet["held_unserved"] or 0.0),
    )


class PrometheusReader:
    """The operator's signal source: one query client per Prometheus URL and way of checking
    its certificate (kept, so its HTTP connections are reused tick after tick), windows
    derived from the settings.

    ``trust`` turns a model's spec.autoscaling.prometheusTLS into the client's ``verify``
    (reading a CA bundle is the edge's business); without one every https certificate is
    checked against the public CAs.

    - rate window = the scale-up window (at least two intervals): the breach the policy
      waits out is measured over the same span;
    - hit window = twice the scale-down window: see ``queries``;
    - stale after max(60 s, 3 intervals) without a scrape.
    """

    def __init__(
        self,
        make_query: Callable[[str, float, Verify], QueryFn],
        timeout_seconds: float = 5.0,
        default_url: str | None = None,
        trust: TrustFn | None = None,
    ) -> None:
        self._default_url = default_url or None  # the operator's --prometheus-url, for specs that name none
        self._timeout = timeout_seconds
        self._make_query = make_query
        self._trust = trust
        self._clients: dict[tuple[str, Verify], QueryFn] = {}

    def __call__(
        self,
        settings: AutoscalingSettings,
        namespace: str,
        engine_pods: Sequence[str],
        router_pods: Sequence[str],
        young: Sequence[str],
        now: float,
    ) -> FleetSignals:
        url = settings.prometheus or self._default_url
        if not url:
            raise MetricsUnavailable(
                "no Prometheus to read: set spec.autoscaling.prometheus, or start the operator with "
                "--prometheus-url (the chart's prometheusURL)",
                UNREACHABLE,
            )
        verify = self._trust(namespace, settings.prometheus_tls) if self._trust else True
        query = self._clients.get((url, verify))
        if query is None:
            query = self._clients[url, verify] = self._make_query(url, self._timeout, verify)
        window = max(settings.scale_up_window_seconds, 2 * settings.interval_seconds)
        return read_signals(
            query,
            namespace,
            engine_pods,
            router_pods,
            now,
            window=queries.seconds(window),
            hit_window=queries.seconds(max(window, 2 * settings.scale_down_window_seconds)),
            stale_after_seconds=max(STALE_AFTER_SECONDS, 3 * settings.interval_seconds),
            young=young,
            at_zero=settings.min_replicas == 0,
        )
