"""Reading a fleet's signals from Prometheus query results (pure: the query function is given).

Anything missing or stale raises MetricsUnavailable with a reason a user can act
on; the operator then holds the replica count and says why in a condition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixroute.autoscaling import queries
from prefixroute.autoscaling.settings import AutoscalingSettings, PrometheusTLS
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals

QueryFn = Callable[[str], Sequence[Mapping[str, Any]]]
Result = Sequence[Mapping[str, Any]]
MapFn = Callable[[QueryFn, Sequence[str]], Iterable[Result]]
"""How a batch's queries are run: ``map`` one after another, or an executor's ``map`` side by
side (results in order; a query's MetricsUnavailable raised when its result is reached)."""
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


Pod = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class FleetRequest:
    """One model's fleet to read: its ready engine pods, its router pods, the engines that
    turned ready moments ago (allowed to have no series yet), and whether it may rest at zero
    engines (then no engine is a state to read, not a fleet still starting)."""

    namespace: str
    engine_pods: tuple[str, ...]
    router_pods: tuple[str, ...] = ()
    young: tuple[str, ...] = ()
    at_zero: bool = False


ENGINE_SIGNALS = (
    "waiting",
    "running",
    "kv_usage",
    "hit_tokens_rate",
    "query_tokens_rate",
    "request_rate",
    "last_scrape",
)
ROUTER_SIGNALS = ("router_imbalance", "held", "held_unserved")


def _per_pod(result: Sequence[Mapping[str, Any]]) -> dict[Pod, float]:
    out: dict[Pod, float] = {}
    for series in result:
        labels = series.get("metric", {})
        pod, namespace = labels.get("pod"), labels.get("namespace")
        value = float(series["value"][1])
        if pod and namespace is not None and not math.isnan(value):
            out[(namespace, pod)] = value
    return out


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def _per_fleet(result: Sequence[Mapping[str, Any]]) -> dict[int, float | None]:
    out: dict[int, float | None] = {}
    for series in result:
        tag = series.get("metric", {}).get(queries.FLEET_LABEL)
        if tag is not None and str(tag).isdigit():
            out[int(tag)] = _finite(float(series["value"][1]))
    return out


def _routers(found: Mapping[str, dict[Pod, float]], fleet: FleetRequest) -> tuple[float | None, float]:
    """The routers' worst imbalance and what they hold (now, plus holds that gave up)."""
    keys = [(fleet.namespace, r) for r in fleet.router_pods]
    imbalance = [v for k in keys if (v := found["router_imbalance"].get(k)) is not None and not math.isinf(v)]
    held = sum(found[name].get(k, 0.0) for name in ("held", "held_unserved") for k in keys)
    return (max(imbalance) if imbalance else None), held


def _engines_of(fleet: FleetRequest, per_pod: Mapping[str, dict[Pod, float]], now: float, stale: float) -> list[str]:
    """The fleet's engines with fresh series; raises MetricsUnavailable as a single read would."""
    pods = sorted(set(fleet.engine_pods))
    key = fleet.namespace
    unscraped = [p for p in pods if (key, p) not in per_pod["running"] or (key, p) not in per_pod["waiting"]]
    waiting_for = set(fleet.young)
    missing = [p for p in unscraped if p not in waiting_for]
    if missing:
        raise MetricsUnavailable(
            f"no engine metrics (vLLM's or SGLang's) in Prometheus for engine pods {', '.join(missing)}", MISSING
        )
    pods = [p for p in pods if p not in unscraped]
    if not pods:
        raise MetricsUnavailable("no engine pod has been scraped yet", NOT_SCRAPED_YET)
    stale_pods = [p for p in pods if now - per_pod["last_scrape"].get((key, p), 0.0) > stale]
    if stale_pods:
        raise MetricsUnavailable(
            f"metrics of {', '.join(stale_pods)} are older than {stale:.0f}s (scrapes failing?)", STALE
        )
    return pods


def read_fleets(
    query: QueryFn,
    fleets: Sequence[FleetRequest],
    now: float,
    window: str = "1m",
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    hit_window: str | None = None,
    run: MapFn = map,
) -> list[FleetSignals | MetricsUnavailable]:
    """Every fleet's signals now, in the order asked (or why not: MetricsUnavailable, as a
    value), from one query per signal for all of them (TTFT: one per ``queries.CHUNK`` fleets),
    in two steps of queries that ``run`` may run side by side: the per-pod signals, then the
    TTFT of the fleets they found serving. ``now`` is wall-clock seconds (it is compared with
    scrape times). A query that fails fails every fleet with its reason."""
    selector = queries.namespace_selector({f.namespace for f in fleets})
    try:
        asked: dict[str, str] = {}
        if any(f.engine_pods for f in fleets):
            asked |= queries.engine_queries(selector, window, hit_window)
        if any(f.router_pods for f in fleets):
            asked |= queries.routers_queries(selector, window)
        answers = dict(zip(asked, run(query, list(asked.values())), strict=True))
        per_pod = {name: _per_pod(answers.get(name, ())) for name in ENGINE_SIGNALS}
        routers = {name: _per_pod(answers.get(name, ())) for name in ROUTER_SIGNALS}
        engines: list[list[str] | MetricsUnavailable] = []
        for fleet in fleets:
            if not fleet.engine_pods:
                engines.append(
                    []
                    if fleet.at_zero
                    else MetricsUnavailable("the resource has no ready engine pods to read metrics for", NO_ENGINE_PODS)
                )
                continue
            try:
                engines.append(_engines_of(fleet, per_pod, now, stale_after_seconds))
            except MetricsUnavailable as exc:
                engines.append(exc)
        serving = [(i, e) for i, e in enumerate(engines) if isinstance(e, list) and e]
        ttft_asked: list[tuple[str, list[int], str]] = []
        for start in range(0, len(serving), queries.CHUNK):
            chunk = serving[start : start + queries.CHUNK]
            selectors = [queries.pod_selector(fleets[i].namespace, pods) for i, pods in chunk]
            for name, q in queries.fleets_ttft_queries(selectors, window).items():
                ttft_asked.append((name, [i for i, _ in chunk], q))
        ttft: dict[str, dict[int, float | None]] = {"ttft_p50": {}, "ttft_p90": {}}
        for (name, places, _), result in zip(ttft_asked, run(query, [q for _, _, q in ttft_asked]), strict=True):
            for place, value in _per_fleet(result).items():
                if place < len(places):
                    ttft[name][places[place]] = value
    except MetricsUnavailable as exc:
        return [exc] * len(fleets)
    out: list[FleetSignals | MetricsUnavailable] = []
    for i, (fleet, found) in enumerate(zip(fleets, engines, strict=True)):
        if isinstance(found, MetricsUnavailable):
            out.append(found)
            continue
        imbalance, held = _routers(routers, fleet)
        members = tuple(
            MemberSignals(
                name=p,
                waiting=per_pod["waiting"][(fleet.namespace, p)],
                running=per_pod["running"][(fleet.namespace, p)],
                kv_usage=per_pod["kv_usage"].get((fleet.namespace, p), 0.0),
                hit_tokens_rate=per_pod["hit_tokens_rate"].get((fleet.namespace, p), 0.0),
                query_tokens_rate=per_pod["query_tokens_rate"].get((fleet.namespace, p), 0.0),
                request_rate=per_pod["request_rate"].get((fleet.namespace, p), 0.0),
            )
            for p in found
        )
        out.append(
            FleetSignals(
                at=now,
                members=members,
                ttft_p50=ttft["ttft_p50"].get(i),
                ttft_p90=ttft["ttft_p90"].get(i),
                router_imbalance=imbalance if members else None,
                held=held,
            )
        )
    return out


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
    """One fleet's signals now (``read_fleets`` for one); raises MetricsUnavailable.

    Pods named in `young` became ready so recently that Prometheus may not have scraped
    them yet: without series they are left out of the snapshot instead of failing it.
    ``at_zero``: the model may scale to zero, so no engine pod at all is a state to read
    (the routers' held requests), not a fleet still starting."""
    fleet = FleetRequest(namespace, tuple(engine_pods), tuple(router_pods), tuple(young), at_zero)
    (found,) = read_fleets(query, [fleet], now, window, stale_after_seconds, hit_window)
    if isinstance(found, MetricsUnavailable):
        raise found
    return found


@dataclass(frozen=True)
class SignalsRequest:
    """What one model's tick asks the reader: its settings and its fleet."""

    settings: AutoscalingSettings
    namespace: str
    engine_pods: tuple[str, ...]
    router_pods: tuple[str, ...] = ()
    young: tuple[str, ...] = ()


class PrometheusReader:
    """The operator's signal source: one query client per Prometheus URL and way of checking
    its certificate (kept, so its HTTP connections are reused tick after tick), windows
    derived from the settings, and one batch of queries per Prometheus, way of checking and
    windows for all the models that tick together (``read_fleets``), however many there are.

    ``trust`` turns a model's spec.autoscaling.prometheusTLS into the client's ``verify``
    (reading a CA bundle is the edge's business); without one every https certificate is
    checked against the public CAs. A model whose CA cannot be read fails alone.

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
        run: MapFn = map,
    ) -> None:
        self._default_url = default_url or None  # the operator's --prometheus-url, for specs that name none
        self._timeout = timeout_seconds
        self._make_query = make_query
        self._trust = trust
        self._run = run  # how a batch's queries go out (the operator: four at a time)
        self._clients: dict[tuple[str, Verify], QueryFn] = {}

    @staticmethod
    def windows(settings: AutoscalingSettings) -> tuple[str, str, float]:
        """(rate window, hit window, stale after seconds) for these settings."""
        window = max(settings.scale_up_window_seconds, 2 * settings.interval_seconds)
        return (
            queries.seconds(window),
            queries.seconds(max(window, 2 * settings.scale_down_window_seconds)),
            max(STALE_AFTER_SECONDS, 3 * settings.interval_seconds),
        )

    def __call__(self, requests: Sequence[SignalsRequest], now: float) -> list[FleetSignals | MetricsUnavailable]:
        """Each request's signals, or why not, in the order asked."""
        out: list[FleetSignals | MetricsUnavailable] = [_no_prometheus() for _ in requests]
        groups: dict[tuple[str, Verify, str, str, float], list[int]] = {}
        for i, request in enumerate(requests):
            url = request.settings.prometheus or self._default_url
            if not url:
                continue
            try:
                verify = self._trust(request.namespace, request.settings.prometheus_tls) if self._trust else True
            except MetricsUnavailable as exc:  # this model's CA: its own fault, not its batch's
                out[i] = exc
                continue
            groups.setdefault((url, verify, *self.windows(request.settings)), []).append(i)
        for (url, verify, window, hit_window, stale), members in groups.items():
            query = self._clients.get((url, verify))
            if query is None:
                query = self._clients[url, verify] = self._make_query(url, self._timeout, verify)
            fleets = [
                FleetRequest(
                    requests[i].namespace,
                    tuple(requests[i].engine_pods),
                    tuple(requests[i].router_pods),
                    tuple(requests[i].young),
                    at_zero=requests[i].settings.min_replicas == 0,
                )
                for i in members
            ]
            found = read_fleets(
                query, fleets, now, window=window, stale_after_seconds=stale, hit_window=hit_window, run=self._run
            )
            for i, result in zip(members, found, strict=True):
                out[i] = result
        return out


def _no_prometheus() -> MetricsUnavailable:
    return MetricsUnavailable(
        "no Prometheus to read: set spec.autoscaling.prometheus, or start the operator with "
        "--prometheus-url (the chart's prometheusURL)",
        UNREACHABLE,
    )
