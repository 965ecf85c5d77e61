"""`bench autoscale`: the real autoscaling policy against a naive queue-only one, in virtual time.

The fleet is the bench simulator's (`fleet_sim.SimFleet`: engine-model `Scheduler`s over
their own `KVCache`, routed through the routing core's one dispatch exactly as the router
routes — first tokens and completions reach the load view as the router reports them),
but its size changes: every `interval_seconds` a policy reads the fleet's signals — the
same `FleetSignals` the operator reads from Prometheus, computed here from the engines'
gauges and counters over the same windows — and the simulated operator acts on its
decision: a new replica joins after `startup_seconds` (pod start, model load), a removed
one stops taking requests at once and finishes those it has.

Two policies, each run over the same requests:

- **prefixroute**: `prefixroute.autoscaling.policy.step`, the operator's own code, with its
  actuation as the operator does it — ring weights (slow start of new replicas, halved
  weight of a hot spot, 0 for the replica being drained), the coldest replica drained
  first and removed only when idle.
- **queue-only** (the baseline; here, not in the product): what an HPA/KEDA ScaledObject
  on `vllm:num_requests_waiting` does — desired = ceil(replicas × waiting per replica /
  target), a 10% tolerance, scale-up at once, scale-down to the highest desired count of
  the last stabilisation window (the HPA's default 300 s), the newest replica removed
  first (the ReplicaSet's choice), new replicas at full weight at once.

The workload changes over time (`scenario`): a ramp, a diurnal swing, a tenant that turns
hot all of a sudden, a quiet tail; tenants have long system prompts (Zipf popularity),
so where a request lands decides whether its prefix is cached. Reported per policy: scale
events, mean replicas, hit rate, TTFT p50/p99 overall and per phase, the share of minutes
whose TTFT p99 stays within a target, and how closely the replica count follows the
arrival rate; and prefixroute's ratios to the baseline from the same run.
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from prefixroute.autoscaling.policy import SCALE_DOWN, PolicyState, step
from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals
from prefixroute.bench.errors import BenchError, exit_status
from prefixroute.bench.fleet_sim import Arrival, Routed, SimFleet
from prefixroute.bench.results import percentile
from prefixroute.bench.simulate import Prepared, prepare
from prefixroute.bench.texts import random_text
from prefixroute.bench.workload import BenchRequest, Body
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_model.scheduler import Event
from prefixroute.routing import slow_start
from prefixroute.routing.config import RoutingConfig

OURS, NAIVE = "prefixroute", "queue-only"


# --- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    start: float  # seconds
    end: float


@dataclass(frozen=True)
class Scenario:
    """Arrival rate over time (requests/s) in phases; one tenant turns hot in the "hot tenant" phase."""

    minutes: float = 90.0
    base_peak: float = 8.0  # requests/s at the top of the ramp and of the diurnal swing
    base_trough: float = 2.0
    hot_rate: float = 6.0  # the hot tenant's extra requests/s
    tail_rate: float = 1.5
    tenants: int = 40
    hot_tenant: int = 29  # a tenant that is quiet until then (Zipf rank 30)
    system_tokens: int = 2048
    question_tokens: int = 128
    output_tokens: int = 128
    zipf: float = 1.1

    def phases(self) -> list[Phase]:
        t = self.minutes * 60.0
        cuts = [0.0, 0.22 * t, 0.67 * t, 0.83 * t, t]  # 20 / 40 / 15 / 15 minutes of 90
        names = ["ramp", "diurnal", "hot tenant", "quiet"]
        return [Phase(n, a, b) for n, a, b in zip(names, cuts, cuts[1:])]

    def base_rate(self, at: float) -> float:
        ramp, diurnal, hot, _quiet = self.phases()
        if at < ramp.end:
            return self.base_trough / 2 + (self.base_peak - self.base_trough / 2) * at / ramp.end
        if at < diurnal.end:
            x = (at - diurnal.start) / (diurnal.end - diurnal.start)
            middle, swing = (self.base_peak + self.base_trough) / 2, (self.base_peak - self.base_trough) / 2
            return middle + swing * math.cos(2 * math.pi * x)
        if at < hot.end:
            return (self.base_peak + self.base_trough) / 2
        return self.tail_rate

    def hot_extra(self, at: float) -> float:
        hot = self.phases()[2]
        return self.hot_rate if hot.start <= at < hot.end else 0.0

    def rate(self, at: float) -> float:
        return self.base_rate(at) + self.hot_extra(at)


def workload(s: Scenario, seed: int = 0) -> list[BenchRequest]:
    """Poisson arrivals at `s.rate(t)` (thinning), tenants by Zipf popularity except the hot
    tenant's own extra stream; each request its tenant's system prompt plus a unique question."""
    rng = np.random.default_rng(seed)
    end = s.minutes * 60.0
    peak = max(s.rate(t) for t in np.linspace(0, end, 2000)) * 1.05
    weights = 1.0 / np.arange(1, s.tenants + 1) ** s.zipf
    weights /= weights.sum()
    out: list[BenchRequest] = []
    at, i = 0.0, 0
    while True:
        at += float(rng.exponential(1.0 / peak))
        if at >= end:
            break
        u = float(rng.random()) * peak
        base, extra = s.base_rate(at), s.hot_extra(at)
        if u >= base + extra:
            continue
        tenant = s.hot_tenant if u >= base else int(rng.choice(s.tenants, p=weights))

        def build(tenant: int = tenant, i: int = i) -> Body:
            return {
                "messages": [
                    {"role": "system", "content": random_text(f"tenant-{seed}", tenant, s.system_tokens)},
                    {"role": "user", "content": random_text(f"question-{seed}", i, s.question_tokens)},
                ]
            }

        out.append(BenchRequest(at, "chat", build, s.output_tokens, tenant=f"tenant-{tenant}"))
        i += 1
    return out


# --- the policies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    replicas: int  # the Deployment's replicas after this decision
    weights: dict[str, float]  # ring weight per serving member (absent: 1)
    remove: tuple[str, ...] = ()  # members to take out now (they finish what they hold)
    label: str = "hold"


class Policy(Protocol):
    name: str

    def decide(self, signals: FleetSignals, replicas: int, members: Sequence[str], now: float) -> Action: ...


class Prefixroute:
    """The operator's policy and actuation: weights from the decision, the drained member removed."""

    name = OURS

    def __init__(self, settings: AutoscalingSettings, slow_start_seconds: float = slow_start.DEFAULT_SECONDS) -> None:
        self.settings = settings
        self.state = PolicyState()
        self.slow_start_seconds = slow_start_seconds
        self.first_seen: dict[str, float] = {}  # the initial fleet counts as warm (-inf)

    def decide(self, signals: FleetSignals, replicas: int, members: Sequence[str], now: float) -> Action:
        self.state, d = step(self.state, signals, replicas, self.settings, now)
        # the operator's ring ramps new members (routing.slow_start); so does this
        first = not self.first_seen
        self.first_seen = {m: self.first_seen.get(m, -math.inf if first else now) for m in members}
        ages = {m: now - self.first_seen[m] for m in members}
        weights = slow_start.ramped({m: d.weights.get(m, 1.0) for m in members}, ages, self.slow_start_seconds)
        remove: tuple[str, ...] = ()
        if d.action == SCALE_DOWN:
            if d.drain_member in members:
                remove = (str(d.drain_member),)
            else:  # moved inside [min, max] without a drain: the newest go, as a ReplicaSet would
                remove = tuple(sorted(members, key=_age)[: max(0, len(members) - d.replicas)])
        return Action(d.replicas, weights, remove, d.action)


class QueueOnly:
    """The baseline: an HPA on average `vllm:num_requests_waiting` per replica (see the module doc)."""

    name = NAIVE
    tolerance = 0.1

    def __init__(self, settings: AutoscalingSettings, stabilisation_seconds: float = 300.0) -> None:
        self.settings = settings
        self.window = stabilisation_seconds
        self.recommendations: deque[tuple[float, int]] = deque()

    def decide(self, signals: FleetSignals, replicas: int, members: Sequence[str], now: float) -> Action:
        s = self.settings
        ratio = (signals.waiting / max(1, replicas)) / s.target_queue_depth
        desired = replicas if abs(ratio - 1.0) <= self.tolerance else math.ceil(replicas * ratio)
        desired = min(s.max_replicas, max(s.min_replicas, desired))
        self.recommendations.append((now, desired))
        while self.recommendations and self.recommendations[0][0] < now - self.window:
            self.recommendations.popleft()
        if desired < replicas:  # scale down only to the highest recommendation of the window
            desired = min(replicas, max(r for _, r in self.recommendations))
        if desired > replicas:
            desired = min(desired, replicas + max(4, replicas))  # the HPA's default scale-up policies
        remove = tuple(sorted(members, key=_age)[: max(0, len(members) - desired)]) if desired < replicas else ()
        label = "scale-up" if desired > replicas else "scale-down" if desired < replicas else "hold"
        return Action(desired, {}, remove, label)


def _age(name: str) -> int:
    """Newest first: engine-12 joined after engine-3."""
    return -int(name.rsplit("-", 1)[1])


# --- one run -----------------------------------------------------------------------------------


@dataclass
class Tick:
    at: float
    replicas: int  # asked for
    serving: int  # members taking requests
    action: str


@dataclass
class Outcome:
    policy: str
    ttfts: list[tuple[float, float]] = field(default_factory=list)  # (arrival, ttft)
    tokens: list[tuple[float, int, int]] = field(default_factory=list)  # (arrival, prompt, cached)
    ticks: list[Tick] = field(default_factory=list)
    scale_events: int = 0
    replicas_moved: int = 0

    @property
    def hit_rate(self) -> float:
        prompt = sum(p for _, p, _ in self.tokens)
        return sum(c for _, _, c in self.tokens) / prompt if prompt else 0.0

    def mean_replicas(self) -> float:
        return float(np.mean([t.replicas for t in self.ticks])) if self.ticks else 0.0


@dataclass
class EngineRecord:
    """What the simulated Prometheus remembers of one serving engine."""

    joined: float
    counters: deque[tuple[float, int, int, int]] = field(default_factory=deque)  # (at, hits, queries, finished)
    finished: int = 0


def counter_rate(samples: deque[tuple[float, int, int, int]], now: float, span: float, k: int) -> float:
    """Per-second increase of field `k` of the counter samples `(at, ...)` over the last `span`
    seconds, from the oldest sample within the span (else the oldest kept) to the newest."""
    old = next((s for s in samples if s[0] >= now - span), samples[0]) if samples else None
    if old is None or now <= old[0]:
        return 0.0
    return (samples[-1][k] - old[k]) / (now - old[0])


def order_replicas(pending: list[tuple[float, int]], serving: int, replicas: int, ready_at: float, order: int) -> int:
    """Makes `serving` members plus the starting ones in `pending` (a heap of (ready at, order))
    come to `replicas`: new ones, ready at `ready_at`, are ordered, or the newest starting ones
    are cancelled (a scale-up overtaken by a scale-down). Returns the last order number used."""
    for _ in range(max(0, replicas - serving - len(pending))):
        order += 1
        heapq.heappush(pending, (ready_at, order))
    while serving + len(pending) > replicas and pending:
        pending.remove(max(pending))
        heapq.heapify(pending)
    return order


class SimulatedCluster:
    """One policy's run in progress: the fleet, what the simulated Prometheus remembers of its
    serving engines, the replicas the policy asked for and those still starting."""

    def __init__(
        self,
        policy: Policy,
        settings: AutoscalingSettings,
        engine: EngineConfig,
        routing: RoutingConfig,
        startup_seconds: float,
        replicas: int,
    ) -> None:
        self.policy, self.settings, self.startup_seconds = policy, settings, startup_seconds
        self.out = Outcome(policy.name)
        self.records: dict[str, EngineRecord] = {}  # serving members
        self.pending: list[tuple[float, int]] = []  # (ready at, order)
        self.born = 0
        self.order = 0
        self.recent_ttfts: deque[tuple[float, float]] = deque()  # (first token at, ttft)
        self.window = max(settings.scale_up_window_seconds, 2 * settings.interval_seconds)
        self.hit_window = max(self.window, 2 * settings.scale_down_window_seconds)
        self.replicas = replicas
        self.fleet = SimFleet(routing, engine, on_first_token=self._first_token, on_finished=self._finished)

    def _first_token(self, routed: Routed, event: Event) -> None:
        arrival = routed.arrival.at
        self.out.ttfts.append((arrival, event.time - arrival))
        self.recent_ttfts.append((event.time, event.time - arrival))

    def _finished(self, routed: Routed, event: Event) -> None:
        seq = routed.sequence
        self.out.tokens.append((routed.arrival.at, seq.prompt_tokens, seq.cached_tokens))
        record = self.records.get(routed.ticket.member.name)
        if record is not None:  # a retired engine's completions no longer reach Prometheus
            record.finished += 1

    def add_engine(self, now: float) -> None:
        name = f"engine-{self.born}"
        self.born += 1
        self.records[name] = EngineRecord(now)
        self.fleet.add(name)

    def _member_signals(self, name: str, record: EngineRecord, now: float) -> MemberSignals:
        scheduler = self.fleet.engines[name]
        cache = scheduler.cache
        record.counters.append((now, cache.hits, cache.queries, record.finished))
        while record.counters and record.counters[0][0] < now - self.hit_window - self.settings.interval_seconds:
            record.counters.popleft()
        return MemberSignals(
            name,
            waiting=scheduler.num_waiting,
            running=scheduler.num_running,
            kv_usage=scheduler.kv_usage(),
            hit_tokens_rate=counter_rate(record.counters, now, self.hit_window, 1),
            query_tokens_rate=counter_rate(record.counters, now, self.hit_window, 2),
            request_rate=counter_rate(record.counters, now, self.window, 3),
        )

    def signals(self, now: float) -> FleetSignals:
        """What the operator would read from Prometheus now."""
        members = [self._member_signals(name, record, now) for name, record in self.records.items()]
        while self.recent_ttfts and self.recent_ttfts[0][0] < now - self.window:
            self.recent_ttfts.popleft()
        p50 = percentile([t for _, t in self.recent_ttfts], 50) if self.recent_ttfts else None
        return FleetSignals(at=now, members=tuple(members), ttft_p50=p50)

    def tick(self, now: float) -> None:
        """The policy decides on the fleet's signals, and its decision is carried out."""
        members = sorted(self.records)
        action = self.policy.decide(self.signals(now), self.replicas, members, now)
        if action.replicas != self.replicas:
            self.out.scale_events += 1
            self.out.replicas_moved += abs(action.replicas - self.replicas)
        for name in action.remove:
            del self.records[name]
        self.fleet.retire(action.remove)
        ready_at = now + self.startup_seconds
        self.order = order_replicas(self.pending, len(self.records), action.replicas, ready_at, self.order)
        self.replicas = action.replicas
        self.fleet.set_weights(action.weights)
        self.out.ticks.append(Tick(now, self.replicas, len(self.records), action.label))


def run(
    prepared: Sequence[Prepared],
    policy: Policy,
    settings: AutoscalingSettings,
    engine: EngineConfig,
    routing: RoutingConfig,
    startup_seconds: float = 60.0,
    initial: int | None = None,
) -> Outcome:
    """One policy over the prepared requests; deterministic. Arrivals, policy ticks and
    replicas becoming ready are taken in time order (a replica first, then a tick, then an
    arrival at the same instant)."""
    replicas = initial if initial is not None else settings.min_replicas
    cluster = SimulatedCluster(policy, settings, engine, routing, startup_seconds, replicas)
    for _ in range(replicas):
        cluster.add_engine(-math.inf)
    next_tick = 0.0
    arrivals = iter(enumerate(prepared))
    item: tuple[int, Prepared] | None = next(arrivals, None)
    while item is not None:
        i, req = item
        pending = cluster.pending
        upcoming = min(req.at, next_tick, pending[0][0] if pending else math.inf)
        cluster.fleet.advance_to(upcoming)
        if pending and pending[0][0] <= upcoming:
            heapq.heappop(pending)
            cluster.add_engine(upcoming)
            continue
        if next_tick <= req.at:
            cluster.tick(next_tick)
            next_tick += settings.interval_seconds
            continue
        item = next(arrivals, None)
        if req.error is not None or req.routing is None:
            continue
        cluster.fleet.submit(Arrival(f"r{i}", req.at, req.routing, req.blocks, req.prompt_tokens, req.output_tokens))
    cluster.fleet.advance_to(math.inf)
    return cluster.out


# --- the report ----------------------------------------------------------------------------------


def per_minute(outcome: Outcome, minutes: int) -> dict[str, list[float]]:
    """TTFT p99, hit rate, arrivals and replicas per minute of arrival time."""
    ttft: list[list[float]] = [[] for _ in range(minutes)]
    for at, t in outcome.ttfts:
        ttft[min(minutes - 1, int(at // 60))].append(t)
    prompt, cached = [0] * minutes, [0] * minutes
    for at, p, c in outcome.tokens:
        m = min(minutes - 1, int(at // 60))
        prompt[m] += p
        cached[m] += c
    replicas = [0.0] * minutes
    counts = [0] * minutes
    for tick in outcome.ticks:
        m = min(minutes - 1, int(tick.at // 60))
        replicas[m] += tick.replicas
        counts[m] += 1
    return {
        "ttft_p99": [percentile(v, 99) if v else math.nan for v in ttft],
        "hit_rate": [c / p if p else math.nan for p, c in zip(prompt, cached)],
        "arrivals": [len(v) / 60.0 for v in ttft],
        "replicas": [r / c if c else math.nan for r, c in zip(replicas, counts)],
    }


def summarise(outcome: Outcome, scenario: Scenario, ttft_p99_target: float) -> dict[str, Any]:
    minutes = math.ceil(scenario.minutes)
    series = per_minute(outcome, minutes)
    within = [v <= ttft_p99_target for v in series["ttft_p99"] if not math.isnan(v)]
    pairs = [(a, r) for a, r in zip(series["arrivals"], series["replicas"]) if not math.isnan(r)]
    follow = float(np.corrcoef(np.array(pairs).T)[0, 1]) if len(pairs) > 2 else math.nan
    phases = {}
    for phase in scenario.phases():
        values = [t for at, t in outcome.ttfts if phase.start <= at < phase.end]
        prompt = sum(p for at, p, _ in outcome.tokens if phase.start <= at < phase.end)
        cached = sum(c for at, _, c in outcome.tokens if phase.start <= at < phase.end)
        reps = [t.replicas for t in outcome.ticks if phase.start <= t.at < phase.end]
        phases[phase.name] = {
            "ttft_p99": round(percentile(values, 99), 3) if values else None,
            "hit_rate": round(cached / prompt, 4) if prompt else None,
            "mean_replicas": round(float(np.mean(reps)), 2) if reps else None,
        }
    ttfts = [t for _, t in outcome.ttfts]
    return {
        "policy": outcome.policy,
        "requests": len(outcome.tokens),
        "scale_events": outcome.scale_events,
        "replicas_moved": outcome.replicas_moved,
        "mean_replicas": round(outcome.mean_replicas(), 3),
        "max_replicas": max((t.replicas for t in outcome.ticks), default=0),
        "hit_rate": round(outcome.hit_rate, 4),
        "ttft_p50": round(percentile(ttfts, 50), 4),
        "ttft_p99": round(percentile(ttfts, 99), 4),
        "minutes_within_p99_target": round(sum(within) / len(within), 4) if within else None,
        "replicas_follow_load": round(follow, 3),
        "phases": phases,
    }


def ratios(ours: dict[str, Any], naive: dict[str, Any]) -> dict[str, Any]:
    def ratio(key: str) -> float | None:
        return round(ours[key] / naive[key], 3) if naive[key] else None

    return {
        "scale_events": ratio("scale_events"),
        "replicas_moved": ratio("replicas_moved"),
        "mean_replicas": ratio("mean_replicas"),
        "ttft_p99": ratio("ttft_p99"),
        "ttft_p50": ratio("ttft_p50"),
        "hit_rate_minus": round(ours["hit_rate"] - naive["hit_rate"], 4),
    }


def print_report(summaries: list[dict[str, Any]], vs: dict[str, Any], target: float, stream: Any) -> None:
    header = (
        "policy",
        "reqs",
        "scale events",
        "repl moved",
        "mean repl",
        "hit rate",
        "TTFT p50",
        "p99",
        f"min p99≤{target:g}s",
        "follows load",
    )
    rows = [header] + [
        (
            s["policy"],
            str(s["requests"]),
            str(s["scale_events"]),
            str(s["replicas_moved"]),
            f"{s['mean_replicas']:.2f}",
            f"{s['hit_rate']:.1%}",
            f"{s['ttft_p50']:.3f}",
            f"{s['ttft_p99']:.3f}",
            "-" if s["minutes_within_p99_target"] is None else f"{s['minutes_within_p99_target']:.0%}",
            f"{s['replicas_follow_load']:.2f}",
        )
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        stream.write(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + "\n"
        )
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    stream.write("\nper phase (TTFT p99 s / hit rate / mean replicas):\n")
    for s in summaries:
        parts = [
            f"{name}: {p['ttft_p99']} / {p['hit_rate']:.1%} / {p['mean_replicas']}"
            for name, p in s["phases"].items()
            if p["hit_rate"] is not None
        ]
        stream.write(f"  {s['policy']:<12} " + "; ".join(parts) + "\n")
    stream.write(
        f"\n{OURS} vs {NAIVE} (same run): scale events x{vs['scale_events']}, replicas moved "
        f"x{vs['replicas_moved']}, mean replicas x{vs['mean_replicas']}, TTFT p99 x{vs['ttft_p99']}, "
        f"p50 x{vs['ttft_p50']}, hit rate {vs['hit_rate_minus'] * 100:+.1f} points\n"
    )


def plot(outcomes: list[Outcome], scenario: Scenario, target: float, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = math.ceil(scenario.minutes)
    xs = list(range(minutes))
    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(12, 10), sharex=True)
    colours = {OURS: "tab:blue", NAIVE: "tab:orange"}
    series = {o.policy: per_minute(o, minutes) for o in outcomes}
    arrivals = series[outcomes[0].policy]["arrivals"]
    rate_axis = top.twinx()
    rate_axis.fill_between(xs, arrivals, color="0.85", step="mid", label="arrivals (req/s)")
    rate_axis.set_ylabel("arrivals (req/s)")
    for o in outcomes:
        top.step(
            [t.at / 60 for t in o.ticks],
            [t.replicas for t in o.ticks],
            where="post",
            color=colours[o.policy],
            label=f"{o.policy}: {o.scale_events} scale events",
        )
        mid.plot(xs, series[o.policy]["ttft_p99"], color=colours[o.policy], label=o.policy)
        low.plot(
            xs, series[o.policy]["hit_rate"], color=colours[o.policy], label=f"{o.policy} ({o.hit_rate:.0%} overall)"
        )
    top.set_zorder(rate_axis.get_zorder() + 1)
    top.patch.set_visible(False)
    top.set_ylabel("replicas asked for")
    top.legend(loc="upper left", fontsize=8)
    mid.axhline(target, color="0.4", linestyle="--", label=f"TTFT p99 target {target:g}s")
    mid.set_yscale("log")
    mid.set_ylabel("TTFT p99 per minute (s)")
    mid.legend(loc="upper left", fontsize=8)
    low.set_ylabel("prefix hit rate per minute")
    low.set_xlabel("minutes")
    low.legend(loc="lower left", fontsize=8)
    for axis in (top, mid, low):
        axis.grid(True, alpha=0.3)
        for phase in scenario.phases()[1:]:
            axis.axvline(phase.start / 60, color="0.6", linewidth=0.8)
    for phase in scenario.phases():
        top.text(
            (phase.start + phase.end) / 120, top.get_ylim()[1] * 0.97, phase.name, ha="center", va="top", fontsize=8
        )
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- the command -------------------------------------------------------------------------------


def register(sub: Any) -> None:
    p = sub.add_parser("autoscale", help="the autoscaling policy vs a queue-only one, simulated over a changing load")
    p.add_argument("--minutes", type=float, default=90.0, help="length of the scenario (its phases scale with it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-rate", type=float, default=Scenario.base_peak, help="requests/s at the top of the ramp")
    p.add_argument(
        "--ttft-p99-target", type=float, default=5.0, help="seconds; the share of minutes within it is reported"
    )
    p.add_argument(
        "--startup-seconds", type=float, default=60.0, help="a new replica serves this long after it is asked for"
    )
    p.add_argument("--min-replicas", type=int, default=2)
    p.add_argument("--max-replicas", type=int, default=12)
    p.add_argument("--target-queue-depth", type=float, default=2.0, help="both policies' target waiting per replica")
    p.add_argument("--target-ttft-p50", type=float, default=0.5, help="prefixroute's TTFT p50 target (s)")
    p.add_argument("--tenants", type=int, default=Scenario.tenants, help="tenants, each with its own system prompt")
    p.add_argument("--zipf", type=float, default=Scenario.zipf, help="exponent of the tenants' popularity")
    p.add_argument("--prefill-tokens-per-s", type=float, default=1500.0, help="the simulated engine's prefill rate")
    p.add_argument("--max-running", type=int, default=16)
    p.add_argument("--kv-blocks", type=int, default=3000, help="KV cache per replica (16-token blocks)")
    p.add_argument("--json", dest="json_out", metavar="OUT")
    p.add_argument("--plot", metavar="OUT.png")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Bench errors are one line on stderr and exit status 2, as for every bench command."""
    return exit_status(_main, args)


def _main(args: argparse.Namespace) -> int:
    import json
    import time

    if args.tenants < 2 or args.minutes <= 0:
        raise BenchError("--tenants must be at least 2 and --minutes positive")
    scenario = Scenario(
        minutes=args.minutes,
        base_peak=args.peak_rate,
        tenants=args.tenants,
        zipf=args.zipf,
        hot_tenant=min(Scenario.hot_tenant, args.tenants - 1),
    )
    settings = AutoscalingSettings(
        enabled=True,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_queue_depth=args.target_queue_depth,
        target_ttft_p50_seconds=args.target_ttft_p50,
    )
    engine = EngineConfig(
        model="engine-sim",
        kv_blocks=args.kv_blocks,
        max_running=args.max_running,
        latency=LatencyModel(prefill_tokens_per_s=args.prefill_tokens_per_s),
    )
    routing = RoutingConfig()
    started = time.monotonic()
    requests = workload(scenario, args.seed)
    prepared = prepare(requests, routing, engine)
    outcomes = []
    for policy in (Prefixroute(settings), QueueOnly(settings)):
        outcomes.append(run(prepared, policy, settings, engine, routing, startup_seconds=args.startup_seconds))
        print(f"simulated {policy.name} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    summaries = [summarise(o, scenario, args.ttft_p99_target) for o in outcomes]
    vs = ratios(summaries[0], summaries[1])
    print_report(summaries, vs, args.ttft_p99_target, sys.stdout)
    if args.json_out:
        meta = {
            "scenario": scenario.__dict__,
            "settings": settings.__dict__,
            "seed": args.seed,
            "startup_seconds": args.startup_seconds,
            "engine": {
                "kv_blocks": engine.kv_blocks,
                "max_running": engine.max_running,
                "prefill_tokens_per_s": engine.latency.prefill_tokens_per_s,
                "decode_tokens_per_s": engine.latency.decode_tokens_per_s,
            },
        }
        with open(args.json_out, "w") as f:
            json.dump({"run": meta, "policies": summaries, "ratios": vs}, f, indent=1)
            f.write("\n")
    if args.plot:
        plot(
            outcomes,
            scenario,
            args.ttft_p99_target,
            args.plot,
            f"autoscaling, simulated: {len(requests)} requests over {scenario.minutes:g} min (seed {args.seed})",
        )
    return 0
