"""The autoscaling policy: a pure step from (state, signals) to (state, decision).

Rules, in the order they are tried on each tick:

1. Draining: a member chosen for removal has ring weight 0; once its in-flight
   requests reach 0 (or the drain timeout passes) replicas go down by one.
   A sharp spike during a drain cancels it.
2. Spike: queue per replica above spike_factor x target in the last two samples
   scales up at once (the fast path).
   Neither this nor rule 3 or 4 adds replicas while replicas asked for earlier have
   not joined yet (members fewer than replicas; at most five scale-up windows): new
   replicas take a while to start, and the breach they are meant to fix lasts until
   they serve — asking again meanwhile would overshoot. Rule 3 then wants a whole
   window of breach with every replica serving (TTFT over the window lags the queue).
3. Sustained overload: queue per replica or TTFT p50 above target in every
   sample of the scale-up window — and not explained by one hot member alone —
   scales up in proportion to the breach, at most max_scale_up_step at a time.
4. Hot spot: one member above hot_spot_factor x mean load (and above the queue
   target in absolute terms) for the whole window
   first has its ring weight halved (rebalance, down to min_weight); only when
   it is still hot a window after reaching min_weight does the fleet scale up.
   A rebalance is given a scale-up window to work before rule 3 may scale for
   the same breach: the window that follows must show the fleet overloaded with
   the weights as they are now.
5. Scale down: after a calm scale-down window (queue at most half the target,
   TTFT within target) and the cooldowns, if the remaining replicas would each
   hold at most target_queue_depth requests in flight and the hit rate would not
   fall below hit_rate_floor, the coldest member (fewest prefix-cache hits, then
   least KV in use) starts draining.
6. Otherwise hold.

Hysteresis comes from the band between scaling up (above target) and down
(below half the target), from the windows (one noisy sample decides nothing)
and from the cooldowns; a rebalanced member gets its weight back (doubling once
per window) only after a whole window at or below the mean load, not merely
below the hot-spot threshold, so a weight does not swing between halved and
restored. New members' ring weights ramp over slow_start_seconds so a cold
replica is not flooded.

Decisions that keep the replica count but are worth telling (a drain
cancelled, a scale-up blocked at maxReplicas, a scale-down blocked by the hit
rate floor) carry a `note`, the CamelCase reason the operator posts its Event
under; a plain hold has none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals

HOLD, SCALE_UP, SCALE_DOWN, DRAIN, REBALANCE = "hold", "scale-up", "scale-down", "drain", "rebalance"
MIN_SLOW_START_WEIGHT = 0.1
IDLE_LOAD = 1.0  # below this mean load per member there is no hot spot, only noise
JOIN_WAIT_WINDOWS = 5  # scale-up windows to wait for replicas asked for to join before asking for more


@dataclass(frozen=True)
class Sample:
    at: float
    queue_per_replica: float
    ttft_p50: float | None
    in_flight: float
    hot_member: str | None
    hot_ratio: float
    queue_per_replica_without_hot: float
    above_mean: frozenset[str] = frozenset()  # members busier than the mean (on a busy fleet)
    joining: int = 0  # replicas asked for that were not serving yet


@dataclass(frozen=True)
class Draining:
    member: str
    since: float


@dataclass(frozen=True)
class PolicyState:
    samples: tuple[Sample, ...] = ()
    started_at: float | None = None
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    last_rebalance: float | None = None  # a hot member's weight was lowered
    last_restore: float | None = None  # a cooled member's weight was raised
    rebalance_weights: Mapping[str, float] = field(default_factory=dict)
    joined: Mapping[str, float] = field(default_factory=dict)  # first seen; -inf = initial member
    draining: Draining | None = None


@dataclass(frozen=True)
class Decision:
    action: str
    replicas: int  # the engine Deployment's replicas after this decision
    reason: str
    weights: Mapping[str, float]  # ring weight per member, slow start and draining included
    drain_member: str | None = None
    note: str | None = None  # why a hold is worth an Event (CamelCase), None for a plain hold

    @property
    def changes_replicas(self) -> bool:
        return self.action in (SCALE_UP, SCALE_DOWN)


def _sample(signals: FleetSignals, replicas: int, settings: AutoscalingSettings) -> Sample:
    n = max(1, replicas)
    members = signals.members
    hot, ratio = None, 0.0
    above: frozenset[str] = frozenset()
    if members:
        mean = sum(m.load for m in members) / len(members)
        top = max(members, key=lambda m: (m.load, m.name))
        if mean >= IDLE_LOAD:
            above = frozenset(m.name for m in members if m.load > mean)
            ratio = top.load / mean
            # A member is a hot spot only when it is both far above the others and
            # busy in absolute terms: 3 requests against a mean of 1 is noise.
            if ratio > settings.hot_spot_factor and top.load > settings.target_queue_depth:
                hot = top.name
    waiting_without_hot = sum(m.waiting for m in members if m.name != hot)
    return Sample(
        at=signals.at,
        queue_per_replica=signals.waiting / n,
        ttft_p50=signals.ttft_p50,
        in_flight=signals.in_flight,
        hot_member=hot,
        hot_ratio=ratio,
        queue_per_replica_without_hot=waiting_without_hot / max(1, n - (1 if hot else 0)),
        above_mean=above,
        joining=max(0, replicas - len(members)),
    )


def _window(state: PolicyState, now: float, seconds: float, interval: float) -> tuple[Sample, ...] | None:
    """Samples of the last `seconds`, or None while the policy has not watched that long."""
    if state.started_at is None or now - state.started_at < seconds - interval / 2:
        return None
    return tuple(s for s in state.samples if s.at >= now - seconds)


def _breach(sample: Sample, settings: AutoscalingSettings) -> bool:
    ttft_high = sample.ttft_p50 is not None and sample.ttft_p50 > settings.target_ttft_p50_seconds
    return sample.queue_per_replica > settings.target_queue_depth or ttft_high


def _calm(sample: Sample, settings: AutoscalingSettings) -> bool:
    ttft_ok = sample.ttft_p50 is None or sample.ttft_p50 <= settings.target_ttft_p50_seconds
    return sample.queue_per_replica <= settings.target_queue_depth / 2 and ttft_ok


def _since(then: float | None, now: float) -> float:
    return math.inf if then is None else now - then


def _weights(state: PolicyState, signals: FleetSignals, now: float, settings: AutoscalingSettings) -> dict[str, float]:
    """Ring weight per member: rebalance weight x slow-start ramp; 0 for a draining member."""
    out: dict[str, float] = {}
    for m in signals.members:
        weight = state.rebalance_weights.get(m.name, 1.0)
        age = now - state.joined.get(m.name, -math.inf)
        if settings.slow_start_seconds > 0 and age < settings.slow_start_seconds:
            weight *= max(MIN_SLOW_START_WEIGHT, age / settings.slow_start_seconds)
        out[m.name] = round(weight, 3)
    if state.draining is not None and state.draining.member in out:
        out[state.draining.member] = 0.0
    return out


def _coldest(members: tuple[MemberSignals, ...]) -> MemberSignals:
    return min(members, key=lambda m: (m.hit_tokens_rate, m.kv_usage, m.load, m.name))


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.2f}{unit}"


def step(
    state: PolicyState,
    signals: FleetSignals,
    replicas: int,
    settings: AutoscalingSettings,
    now: float,
) -> tuple[PolicyState, Decision]:
    """One tick of the policy. `replicas` is the engine Deployment's current replica count."""
    # Bookkeeping: who joined when (the initial fleet is not slow-started), the sample window.
    first_tick = state.started_at is None
    present = {m.name for m in signals.members}
    joined = {n: t for n, t in state.joined.items() if n in present}
    for name in present - joined.keys():
        joined[name] = -math.inf if first_tick else now
    keep = max(settings.scale_up_window_seconds, settings.scale_down_window_seconds) + settings.interval_seconds
    sample = _sample(signals, replicas, settings)
    samples = tuple(s for s in state.samples if s.at >= now - keep) + (sample,)
    weights_now = {n: w for n, w in state.rebalance_weights.items() if n in present}
    state = replace(
        state,
        samples=samples,
        started_at=now if first_tick else state.started_at,
        joined=joined,
        rebalance_weights=weights_now,
    )
    lo, hi = settings.min_replicas, settings.max_replicas

    def decide(
        new_state: PolicyState, action: str, target: int, reason: str, drain: str | None = None, note: str | None = None
    ) -> tuple[PolicyState, Decision]:
        return new_state, Decision(action, target, reason, _weights(new_state, signals, now, settings), drain, note)

    # 0. Outside the bounds the spec sets (the user edited min/max): move inside at once.
    if replicas < lo or replicas > hi:
        target = min(max(replicas, lo), hi)
        if target > replicas:
            return decide(
                replace(state, draining=None, last_scale_up=now),
                SCALE_UP,
                target,
                f"scaled {replicas}→{target}: replicas must stay within [{lo}, {hi}]",
            )
        return decide(
            replace(state, draining=None, last_scale_down=now),
            SCALE_DOWN,
            target,
            f"scaled {replicas}→{target}: replicas must stay within [{lo}, {hi}]",
        )

    spike = len(samples) >= 2 and all(
        s.queue_per_replica > settings.spike_factor * settings.target_queue_depth for s in samples[-2:]
    )

    # 1. Draining.
    if state.draining is not None:
        victim = signals.member(state.draining.member)
        if spike:
            cancelled = replace(state, draining=None)
            return decide(
                cancelled,
                HOLD,
                replicas,
                f"drain of {state.draining.member} cancelled: queue spike {sample.queue_per_replica:.1f} per replica",
                note="DrainCancelled",
            )
        waited = now - state.draining.since
        if victim is None or victim.load <= 0 or waited >= settings.drain_timeout_seconds:
            how = f"timed out with {victim.load:.0f} in flight" if victim is not None and victim.load > 0 else "drained"
            target = max(lo, replicas - 1)
            done = replace(state, draining=None, last_scale_down=now)
            # The drained member keeps weight 0 until it is gone from the fleet.
            done_weights = dict(done.rebalance_weights)
            done_weights[state.draining.member] = 0.0
            done = replace(done, rebalance_weights=done_weights)
            return decide(
                done,
                SCALE_DOWN,
                target,
                f"scaled {replicas}→{target}: {state.draining.member} {how} after {waited:.0f}s",
                state.draining.member,
            )
        return decide(
            state,
            HOLD,
            replicas,
            f"draining {state.draining.member}: {victim.load:.0f} requests still in flight ({waited:.0f}s)",
        )

    # Replicas asked for but not serving yet (a pod starting, a model loading): adding more
    # on the same breach would overshoot — they will take their share once they join. The
    # wait is bounded, so a replica that never joins (no room for its pod) does not block.
    joining = sample.joining
    join_wait_over = _since(state.last_scale_up, now) >= JOIN_WAIT_WINDOWS * settings.scale_up_window_seconds
    waiting_for_joins = joining > 0 and not join_wait_over
    up_ready = _since(state.last_scale_up, now) >= settings.scale_up_cooldown_seconds and not waiting_for_joins

    # 2. Spike: the fast path.
    if spike and up_ready and replicas < hi:
        factor = sample.queue_per_replica / settings.target_queue_depth
        target = min(hi, replicas + settings.max_scale_up_step, max(replicas + 1, math.ceil(replicas * factor)))
        return decide(
            replace(state, last_scale_up=now),
            SCALE_UP,
            target,
            f"scaled {replicas}→{target}: queue spike {sample.queue_per_replica:.1f} > {settings.spike_factor:g}×{settings.target_queue_depth:g} per replica in two samples",
        )

    up_window = _window(state, now, settings.scale_up_window_seconds, settings.interval_seconds) or ()
    # A breach counts once it lasted a whole window with every replica serving: samples from
    # before replicas joined measure the fleet that was too small (and TTFT lags its queue).
    whole_fleet = join_wait_over or all(s.joining == 0 for s in up_window)
    sustained = bool(up_window) and whole_fleet and all(_breach(s, settings) for s in up_window)
    hot_everywhere = bool(up_window) and all(s.hot_member is not None for s in up_window)
    # A breach that only the hot member causes is a job for rebalancing, not for more replicas.
    explained_by_hot = hot_everywhere and all(
        s.queue_per_replica_without_hot <= settings.target_queue_depth for s in up_window
    )
    # A rebalance gets a window to work before the same breach may add replicas.
    rebalancing = _since(state.last_rebalance, now) < settings.scale_up_window_seconds

    # 3. Sustained overload of the fleet as a whole.
    if sustained and not explained_by_hot and not rebalancing:
        if replicas >= hi:
            overloaded = (
                f"overloaded (queue {sample.queue_per_replica:.1f} per replica, TTFT p50 {_fmt(sample.ttft_p50, 's')})"
            )
            if _since(state.last_scale_up, now) < settings.scale_up_window_seconds:
                # the window still holds samples from before the last scale-up: not news yet
                return decide(
                    state, HOLD, replicas, f"{overloaded}; the replicas added last are joining, at maxReplicas {hi}"
                )
            return decide(state, HOLD, replicas, f"{overloaded} but already at maxReplicas {hi}", note="AtMaxReplicas")
        if up_ready:
            factor = max(
                sample.queue_per_replica / settings.target_queue_depth,
                (sample.ttft_p50 or 0.0) / settings.target_ttft_p50_seconds,
            )
            target = min(hi, replicas + settings.max_scale_up_step, max(replicas + 1, math.ceil(replicas * factor)))
            why = (
                f"queue {sample.queue_per_replica:.1f} > {settings.target_queue_depth:g} per replica"
                if sample.queue_per_replica > settings.target_queue_depth
                else f"TTFT p50 {sample.ttft_p50:.2f}s > {settings.target_ttft_p50_seconds:g}s"
            )
            return decide(
                replace(state, last_scale_up=now),
                SCALE_UP,
                target,
                f"scaled {replicas}→{target}: {why} for {settings.scale_up_window_seconds:.0f}s",
            )

    # 4. Hot spot: rebalance first, scale only when that is not enough.
    hot = up_window[-1].hot_member if hot_everywhere else None
    if hot is not None and all(s.hot_member == hot for s in up_window):
        weight = state.rebalance_weights.get(hot, 1.0)
        settled = _since(state.last_rebalance, now) >= settings.scale_up_window_seconds
        if weight > settings.min_weight and settled:
            new_weight = max(settings.min_weight, weight / 2)
            weights = dict(state.rebalance_weights)
            weights[hot] = new_weight
            return decide(
                replace(state, rebalance_weights=weights, last_rebalance=now),
                REBALANCE,
                replicas,
                f"hot spot: {hot} load {sample.hot_ratio:.1f}× mean for {settings.scale_up_window_seconds:.0f}s; ring weight {weight:g}→{new_weight:g}",
            )
        if weight <= settings.min_weight and settled and up_ready and replicas < hi:
            target = replicas + 1
            return decide(
                replace(state, last_scale_up=now, last_rebalance=now),
                SCALE_UP,
                target,
                f"scaled {replicas}→{target}: hot spot on {hot} ({sample.hot_ratio:.1f}× mean) persists at ring weight {weight:g}",
            )

    # Members that cooled down (at or below the mean load for a whole window) get their
    # weight back, one doubling per window.
    restore_due = (not rebalancing) and _since(state.last_restore, now) >= settings.scale_up_window_seconds
    restored = dict(state.rebalance_weights)
    for name, weight in state.rebalance_weights.items():
        if 0.0 < weight < 1.0 and restore_due and up_window and all(name not in s.above_mean for s in up_window):
            restored[name] = min(1.0, weight * 2)
    if restored != dict(state.rebalance_weights):
        state = replace(state, rebalance_weights=restored, last_restore=now)

    # 5. Scale down, coldest member first, after a calm window.
    down_window = _window(state, now, settings.scale_down_window_seconds, settings.interval_seconds)
    down_ready = (
        _since(state.last_scale_down, now) >= settings.scale_down_cooldown_seconds
        and _since(state.last_scale_up, now) >= settings.scale_down_window_seconds
    )
    if (
        replicas > lo
        and down_window
        and down_ready
        and all(_calm(s, settings) for s in down_window)
        and signals.members
    ):
        peak = max(s.in_flight for s in down_window)
        projected = peak / (replicas - 1) if replicas > 1 else math.inf
        if projected <= settings.target_queue_depth:
            victim = _coldest(signals.members)
            fleet_hit = signals.hit_rate
            queries = sum(m.query_tokens_rate for m in signals.members)
            lost = victim.hit_tokens_rate / queries if queries > 0 else 0.0
            if (
                fleet_hit is not None
                and fleet_hit >= settings.hit_rate_floor
                and fleet_hit - lost < settings.hit_rate_floor
            ):
                return decide(
                    state,
                    HOLD,
                    replicas,
                    f"not scaling down: removing {victim.name} would drop the hit rate {fleet_hit:.0%}→{fleet_hit - lost:.0%} below the floor {settings.hit_rate_floor:.0%}",
                    note="ScaleDownBlocked",
                )
            draining = replace(state, draining=Draining(victim.name, now))
            return decide(
                draining,
                DRAIN,
                replicas,
                f"draining {victim.name} (coldest: {victim.hit_tokens_rate:.0f} hit tokens/s, KV {victim.kv_usage:.0%}) to scale {replicas}→{replicas - 1}: peak {peak:.1f} in flight fits {replicas - 1} replicas for {settings.scale_down_window_seconds:.0f}s",
                victim.name,
            )

    now_text = (
        f"queue {sample.queue_per_replica:.1f} per replica (target {settings.target_queue_depth:g}), "
        f"TTFT p50 {_fmt(sample.ttft_p50, 's')} (target {settings.target_ttft_p50_seconds:g}s)"
    )
    if not _breach(sample, settings):
        return decide(state, HOLD, replicas, f"within targets: {now_text}")
    if rebalancing:
        waiting = "giving the last rebalance a window to work"
    elif waiting_for_joins:
        waiting = f"waiting for {joining} replica(s) asked for to join"
    elif not up_ready:
        waiting = f"in the {settings.scale_up_cooldown_seconds:.0f}s scale-up cooldown"
    elif sustained and explained_by_hot:
        waiting = "the breach is one hot member's, rebalanced as far as it goes"
    else:
        waiting = f"not yet for the whole {settings.scale_up_window_seconds:.0f}s window"
    return decide(state, HOLD, replicas, f"above target, {waiting}: {now_text}")
