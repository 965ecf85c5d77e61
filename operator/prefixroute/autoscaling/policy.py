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

With minReplicas 0 the fleet may rest at zero engines. At zero, requests the routers hold
for want of an engine scale it to one at once (``ScaledFromZero``; nothing else is read
there); and a fleet with no request in flight, none finished and none held for a whole
``scale_to_zero_idle_seconds`` goes to zero in one step (``ScaledToZero``; idle means
nothing to drain), before the scale-down rule is tried.

Hysteresis comes from the band between scaling up (above target) and down
(below half the target), from the windows (one noisy sample decides nothing)
and from the cooldowns; a rebalanced member gets its weight back (doubling once
per window) only after a whole window at or below the mean load, not merely
below the hot-spot threshold, so a weight does not swing between halved and
restored. (New members' slow start is not the policy's: the operator applies it to
every ring, with or without autoscaling — ``routing.slow_start``.)

A drained member keeps weight 0 after its scale-down until it is gone. If the
ReplicaSet removed another pod instead (it deletes pods that are not ready
before any pod-deletion-cost is looked at), the drained member survives the
scale-down: once no more engine pods exist than replicas asked for and it is
still there, its weight comes back (``Decision.restored``, before any rule).

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
    idle: bool = False  # nothing in flight, finished or held


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
    rebalance_weights: Mapping[str, float] = field(default_factory=dict)  # 0: drained, kept until gone
    draining: Draining | None = None


@dataclass(frozen=True)
class Decision:
    action: str
    replicas: int  # the engine Deployment's replicas after this decision
    reason: str
    weights: Mapping[str, float]  # ring weight per member, draining and rebalancing included
    drain_member: str | None = None
    note: str | None = None  # why a hold is worth an Event (CamelCase), None for a plain hold
    restored: tuple[str, ...] = ()  # drained members that survived their scale-down: weight back

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
        idle=signals.idle,
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


def _weights(state: PolicyState, signals: FleetSignals) -> dict[str, float]:
    """Ring weight per member: the rebalance weight (0 for one drained); 0 while draining."""
    out = {m.name: round(state.rebalance_weights.get(m.name, 1.0), 3) for m in signals.members}
    if state.draining is not None and state.draining.member in out:
        out[state.draining.member] = 0.0
    return out


def _coldest(members: tuple[MemberSignals, ...]) -> MemberSignals:
    return min(members, key=lambda m: (m.hit_tokens_rate, m.kv_usage, m.load, m.name))


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.2f}{unit}"


Outcome = tuple[PolicyState, Decision]
"""What a rule returns when it decides: the next state and the decision."""


@dataclass(frozen=True)
class _Tick:
    """One tick as every rule reads it: the inputs and the judgements the rules share."""

    state: PolicyState
    signals: FleetSignals
    replicas: int
    settings: AutoscalingSettings
    now: float
    sample: Sample
    spike: bool  # queue above spike_factor x target in the last two samples
    up_window: tuple[Sample, ...]  # the scale-up window (empty until watched that long)
    joining: int  # replicas asked for that are not serving yet
    join_wait_over: bool  # waited long enough for them: stop waiting
    waiting_for_joins: bool
    up_ready: bool  # scale-up cooldown over and no replica still to join
    sustained: bool  # the whole fleet breached targets for the whole scale-up window
    hot_everywhere: bool  # every sample of the window had a hot member
    explained_by_hot: bool  # ...and without it the fleet was within the queue target
    rebalancing: bool  # the last rebalance is still getting its window to work

    @property
    def lo(self) -> int:
        return self.settings.min_replicas

    @property
    def hi(self) -> int:
        return self.settings.max_replicas

    def decide(
        self,
        state: PolicyState,
        action: str,
        target: int,
        reason: str,
        drain: str | None = None,
        note: str | None = None,
    ) -> Outcome:
        return state, Decision(action, target, reason, _weights(state, self.signals), drain, note)


def step(
    state: PolicyState,
    signals: FleetSignals,
    replicas: int,
    settings: AutoscalingSettings,
    now: float,
) -> tuple[PolicyState, Decision]:
    """One tick of the policy. `replicas` is the engine Deployment's current replica count.

    The rules are tried in the order of the module docstring; the first that decides wins.
    Cooled members get their weight back just before scale-down is considered, so that
    change rides along with whatever the tick decides from there on."""
    state, restored = _survivors(state, signals, replicas)
    tick = _assess(_observe(state, signals, replicas, settings, now), signals, replicas, settings, now)
    outcome: Outcome | None = None
    for rule in (_within_bounds, _from_zero, _drain, _spike, _sustained_overload, _hot_spot):
        outcome = rule(tick)
        if outcome is not None:
            break
    if outcome is None:
        tick = _restore_cooled(tick)
        outcome = _to_zero(tick) or _scale_down(tick) or _hold(tick)
    new_state, decision = outcome
    return new_state, replace(decision, restored=restored) if restored else decision


def _survivors(state: PolicyState, signals: FleetSignals, replicas: int) -> tuple[PolicyState, tuple[str, ...]]:
    """Drained members (weight 0 after their scale-down) that are still there although no more
    engine pods exist than replicas asked for: the ReplicaSet removed another pod. They
    serve again at full weight."""
    if signals.pods is None or signals.pods > replicas or state.draining is not None:
        return state, ()
    present = {m.name for m in signals.members}
    back = tuple(sorted(n for n, w in state.rebalance_weights.items() if w == 0.0 and n in present))
    if not back:
        return state, ()
    weights = {n: w for n, w in state.rebalance_weights.items() if n not in back}
    return replace(state, rebalance_weights=weights), back


def _observe(
    state: PolicyState, signals: FleetSignals, replicas: int, settings: AutoscalingSettings, now: float
) -> PolicyState:
    """Bookkeeping: the sample window, weights of members that are gone forgotten."""
    first_tick = state.started_at is None
    present = {m.name for m in signals.members}
    keep = max(settings.scale_up_window_seconds, settings.scale_down_window_seconds) + settings.interval_seconds
    sample = _sample(signals, replicas, settings)
    return replace(
        state,
        samples=(*(s for s in state.samples if s.at >= now - keep), sample),
        started_at=now if first_tick else state.started_at,
        rebalance_weights={n: w for n, w in state.rebalance_weights.items() if n in present},
    )


def _assess(
    state: PolicyState, signals: FleetSignals, replicas: int, settings: AutoscalingSettings, now: float
) -> _Tick:
    """The judgements several rules share, made once."""
    samples = state.samples
    sample = samples[-1]
    spike = len(samples) >= 2 and all(
        s.queue_per_replica > settings.spike_factor * settings.target_queue_depth for s in samples[-2:]
    )
    # Replicas asked for but not serving yet (a pod starting, a model loading): adding more
    # on the same breach would overshoot — they will take their share once they join. The
    # wait is bounded, so a replica that never joins (no room for its pod) does not block.
    join_wait_over = _since(state.last_scale_up, now) >= JOIN_WAIT_WINDOWS * settings.scale_up_window_seconds
    waiting_for_joins = sample.joining > 0 and not join_wait_over
    up_window = _window(state, now, settings.scale_up_window_seconds, settings.interval_seconds) or ()
    # A breach counts once it lasted a whole window with every replica serving: samples from
    # before replicas joined measure the fleet that was too small (and TTFT lags its queue).
    whole_fleet = join_wait_over or all(s.joining == 0 for s in up_window)
    hot_everywhere = bool(up_window) and all(s.hot_member is not None for s in up_window)
    return _Tick(
        state=state,
        signals=signals,
        replicas=replicas,
        settings=settings,
        now=now,
        sample=sample,
        spike=spike,
        up_window=up_window,
        joining=sample.joining,
        join_wait_over=join_wait_over,
        waiting_for_joins=waiting_for_joins,
        up_ready=_since(state.last_scale_up, now) >= settings.scale_up_cooldown_seconds and not waiting_for_joins,
        sustained=bool(up_window) and whole_fleet and all(_breach(s, settings) for s in up_window),
        hot_everywhere=hot_everywhere,
        # A breach that only the hot member causes is a job for rebalancing, not for more replicas.
        explained_by_hot=hot_everywhere
        and all(s.queue_per_replica_without_hot <= settings.target_queue_depth for s in up_window),
        # A rebalance gets a window to work before the same breach may add replicas.
        rebalancing=_since(state.last_rebalance, now) < settings.scale_up_window_seconds,
    )


def _within_bounds(t: _Tick) -> Outcome | None:
    """Rule 0. Outside the bounds the spec sets (the user edited min/max): move inside at once."""
    replicas, lo, hi = t.replicas, t.lo, t.hi
    if lo <= replicas <= hi:
        return None
    target = min(max(replicas, lo), hi)
    reason = f"scaled {replicas}→{target}: replicas must stay within [{lo}, {hi}]"
    if target > replicas:
        return t.decide(replace(t.state, draining=None, last_scale_up=t.now), SCALE_UP, target, reason)
    return t.decide(replace(t.state, draining=None, last_scale_down=t.now), SCALE_DOWN, target, reason)


def _from_zero(t: _Tick) -> Outcome | None:
    """At zero engines: wake on requests the routers hold, else rest (nothing else to read)."""
    if t.replicas != 0:
        return None
    held = t.signals.held
    if held > 0:
        target = max(1, t.lo)
        return t.decide(
            replace(t.state, last_scale_up=t.now),
            SCALE_UP,
            target,
            f"scaled 0→{target}: {held:.0f} request(s) held by the routers for want of an engine",
            note="ScaledFromZero",
        )
    return t.decide(t.state, HOLD, 0, "at zero replicas: no request is waiting for an engine")


def _to_zero(t: _Tick) -> Outcome | None:
    """An idle fleet that may scale to zero does so after a whole idle window."""
    settings = t.settings
    if t.lo != 0 or t.replicas == 0 or t.state.draining is not None:
        return None
    idle_for = settings.scale_to_zero_idle_seconds
    window = _window(t.state, t.now, idle_for, settings.interval_seconds)
    if not window or not all(s.idle for s in window) or _since(t.state.last_scale_up, t.now) < idle_for:
        return None
    return t.decide(
        replace(t.state, last_scale_down=t.now),
        SCALE_DOWN,
        0,
        f"scaled {t.replicas}→0: no request in flight, finished or held for {idle_for:.0f}s",
        note="ScaledToZero",
    )


def _drain(t: _Tick) -> Outcome | None:
    """Rule 1. A draining member: cancel on a spike, scale down once it is empty (or the
    drain timed out), else wait."""
    draining = t.state.draining
    if draining is None:
        return None
    if t.spike:
        return t.decide(
            replace(t.state, draining=None),
            HOLD,
            t.replicas,
            f"drain of {draining.member} cancelled: queue spike {t.sample.queue_per_replica:.1f} per replica",
            note="DrainCancelled",
        )
    victim = t.signals.member(draining.member)
    waited = t.now - draining.since
    if victim is None or victim.load <= 0 or waited >= t.settings.drain_timeout_seconds:
        return _drained(t, draining, victim, waited)
    return t.decide(
        t.state,
        HOLD,
        t.replicas,
        f"draining {draining.member}: {victim.load:.0f} requests still in flight ({waited:.0f}s)",
    )


def _drained(t: _Tick, draining: Draining, victim: MemberSignals | None, waited: float) -> Outcome:
    """The drain is over: one replica fewer. The drained member keeps weight 0 until it is
    gone from the fleet."""
    how = f"timed out with {victim.load:.0f} in flight" if victim is not None and victim.load > 0 else "drained"
    target = max(t.lo, t.replicas - 1)
    weights = dict(t.state.rebalance_weights)
    weights[draining.member] = 0.0
    return t.decide(
        replace(t.state, draining=None, last_scale_down=t.now, rebalance_weights=weights),
        SCALE_DOWN,
        target,
        f"scaled {t.replicas}→{target}: {draining.member} {how} after {waited:.0f}s",
        draining.member,
    )


def _spike(t: _Tick) -> Outcome | None:
    """Rule 2. The fast path: a sharp queue spike scales up at once."""
    if not (t.spike and t.up_ready and t.replicas < t.hi):
        return None
    s, settings = t.sample, t.settings
    target = _scaled_up(t, s.queue_per_replica / settings.target_queue_depth)
    return t.decide(
        replace(t.state, last_scale_up=t.now),
        SCALE_UP,
        target,
        f"scaled {t.replicas}→{target}: queue spike {s.queue_per_replica:.1f} > {settings.spike_factor:g}×{settings.target_queue_depth:g} per replica in two samples",
    )


def _scaled_up(t: _Tick, factor: float) -> int:
    """Replicas in proportion to the breach: at least one more, at most max_scale_up_step
    more, never above maxReplicas."""
    grown = max(t.replicas + 1, math.ceil(t.replicas * factor))
    return min(t.hi, t.replicas + t.settings.max_scale_up_step, grown)


def _sustained_overload(t: _Tick) -> Outcome | None:
    """Rule 3. The fleet as a whole over target for a whole window (not one hot member's
    doing, not a rebalance still at work): scale up in proportion, or say why not."""
    if not t.sustained or t.explained_by_hot or t.rebalancing:
        return None
    s, settings = t.sample, t.settings
    if t.replicas >= t.hi:
        overloaded = f"overloaded (queue {s.queue_per_replica:.1f} per replica, TTFT p50 {_fmt(s.ttft_p50, 's')})"
        if _since(t.state.last_scale_up, t.now) < settings.scale_up_window_seconds:
            # the window still holds samples from before the last scale-up: not news yet
            return t.decide(
                t.state, HOLD, t.replicas, f"{overloaded}; the replicas added last are joining, at maxReplicas {t.hi}"
            )
        return t.decide(
            t.state, HOLD, t.replicas, f"{overloaded} but already at maxReplicas {t.hi}", note="AtMaxReplicas"
        )
    if not t.up_ready:
        return None
    factor = max(
        s.queue_per_replica / settings.target_queue_depth,
        (s.ttft_p50 or 0.0) / settings.target_ttft_p50_seconds,
    )
    target = _scaled_up(t, factor)
    why = (
        f"queue {s.queue_per_replica:.1f} > {settings.target_queue_depth:g} per replica"
        if s.queue_per_replica > settings.target_queue_depth
        else f"TTFT p50 {s.ttft_p50:.2f}s > {settings.target_ttft_p50_seconds:g}s"
    )
    return t.decide(
        replace(t.state, last_scale_up=t.now),
        SCALE_UP,
        target,
        f"scaled {t.replicas}→{target}: {why} for {settings.scale_up_window_seconds:.0f}s",
    )


def _hot_spot(t: _Tick) -> Outcome | None:
    """Rule 4. One member hot for the whole window: halve its ring weight (down to
    min_weight); scale up by one only when it is still hot a window after that."""
    hot = t.up_window[-1].hot_member if t.hot_everywhere else None
    if hot is None or not all(s.hot_member == hot for s in t.up_window):
        return None
    settings = t.settings
    weight = t.state.rebalance_weights.get(hot, 1.0)
    settled = _since(t.state.last_rebalance, t.now) >= settings.scale_up_window_seconds
    if weight > settings.min_weight and settled:
        new_weight = max(settings.min_weight, weight / 2)
        weights = dict(t.state.rebalance_weights)
        weights[hot] = new_weight
        return t.decide(
            replace(t.state, rebalance_weights=weights, last_rebalance=t.now),
            REBALANCE,
            t.replicas,
            f"hot spot: {hot} load {t.sample.hot_ratio:.1f}× mean for {settings.scale_up_window_seconds:.0f}s; ring weight {weight:g}→{new_weight:g}",
        )
    if weight <= settings.min_weight and settled and t.up_ready and t.replicas < t.hi:
        target = t.replicas + 1
        return t.decide(
            replace(t.state, last_scale_up=t.now, last_rebalance=t.now),
            SCALE_UP,
            target,
            f"scaled {t.replicas}→{target}: hot spot on {hot} ({t.sample.hot_ratio:.1f}× mean) persists at ring weight {weight:g}",
        )
    return None


def _restore_cooled(t: _Tick) -> _Tick:
    """Members that cooled down (at or below the mean load for a whole window) get their
    weight back, one doubling per window."""
    state = t.state
    restore_due = (not t.rebalancing) and _since(state.last_restore, t.now) >= t.settings.scale_up_window_seconds
    restored = dict(state.rebalance_weights)
    for name, weight in state.rebalance_weights.items():
        if 0.0 < weight < 1.0 and restore_due and t.up_window and all(name not in s.above_mean for s in t.up_window):
            restored[name] = min(1.0, weight * 2)
    if restored == dict(state.rebalance_weights):
        return t
    return replace(t, state=replace(state, rebalance_weights=restored, last_restore=t.now))


def _scale_down(t: _Tick) -> Outcome | None:
    """Rule 5. After a calm window and the cooldowns, when one replica fewer would still
    hold the peak in flight, start draining the coldest member — unless the hit-rate
    floor forbids it."""
    settings, replicas = t.settings, t.replicas
    down_window = _window(t.state, t.now, settings.scale_down_window_seconds, settings.interval_seconds)
    if not (
        replicas > t.lo
        and down_window
        and _down_ready(t)
        and all(_calm(s, settings) for s in down_window)
        and t.signals.members
    ):
        return None
    peak = max(s.in_flight for s in down_window)
    projected = peak / (replicas - 1) if replicas > 1 else math.inf
    if projected > settings.target_queue_depth:
        return None
    victim = _coldest(t.signals.members)
    blocked = _below_hit_rate_floor(t, victim)
    if blocked is not None:
        return blocked
    return t.decide(
        replace(t.state, draining=Draining(victim.name, t.now)),
        DRAIN,
        replicas,
        f"draining {victim.name} (coldest: {victim.hit_tokens_rate:.0f} hit tokens/s, KV {victim.kv_usage:.0%}) to scale {replicas}→{replicas - 1}: peak {peak:.1f} in flight fits {replicas - 1} replicas for {settings.scale_down_window_seconds:.0f}s",
        victim.name,
    )


def _down_ready(t: _Tick) -> bool:
    """The scale-down cooldown is over, and no scale-up happened within a scale-down window."""
    return (
        _since(t.state.last_scale_down, t.now) >= t.settings.scale_down_cooldown_seconds
        and _since(t.state.last_scale_up, t.now) >= t.settings.scale_down_window_seconds
    )


def _below_hit_rate_floor(t: _Tick, victim: MemberSignals) -> Outcome | None:
    """A hold when removing `victim` would take the fleet's hit rate from at or above the
    floor to below it (its hits are lost with its cache)."""
    floor = t.settings.hit_rate_floor
    fleet_hit = t.signals.hit_rate
    queries = sum(m.query_tokens_rate for m in t.signals.members)
    lost = victim.hit_tokens_rate / queries if queries > 0 else 0.0
    if fleet_hit is None or fleet_hit < floor or fleet_hit - lost >= floor:
        return None
    return t.decide(
        t.state,
        HOLD,
        t.replicas,
        f"not scaling down: removing {victim.name} would drop the hit rate {fleet_hit:.0%}→{fleet_hit - lost:.0%} below the floor {floor:.0%}",
        note="ScaleDownBlocked",
    )


def _hold(t: _Tick) -> Outcome:
    """Rule 6. Nothing to do: say whether the fleet is within targets or what scaling waits for."""
    s, settings = t.sample, t.settings
    now_text = (
        f"queue {s.queue_per_replica:.1f} per replica (target {settings.target_queue_depth:g}), "
        f"TTFT p50 {_fmt(s.ttft_p50, 's')} (target {settings.target_ttft_p50_seconds:g}s)"
    )
    if not _breach(s, settings):
        return t.decide(t.state, HOLD, t.replicas, f"within targets: {now_text}")
    if t.rebalancing:
        waiting = "giving the last rebalance a window to work"
    elif t.waiting_for_joins:
        waiting = f"waiting for {t.joining} replica(s) asked for to join"
    elif not t.up_ready:
        waiting = f"in the {settings.scale_up_cooldown_seconds:.0f}s scale-up cooldown"
    elif t.sustained and t.explained_by_hot:
        waiting = "the breach is one hot member's, rebalanced as far as it goes"
    else:
        waiting = f"not yet for the whole {settings.scale_up_window_seconds:.0f}s window"
    return t.decide(t.state, HOLD, t.replicas, f"above target, {waiting}: {now_text}")
